"""What the demo's report and lines say about a run: the checks run, progress, the planted bugs.

These tests read the report, the printed lines and the simulation's state after a planted
bug, and check them against what the run did, computed independently where it can be:
the same run traced and untraced runs the same queue operations; progress lines come
when their share of the requests is served, timed within the run; each planted bug does
exactly what its description in ``FAULTS`` says, to the block.
"""

from __future__ import annotations

import io
import re
import time
from dataclasses import replace

import pytest

from verified_queue.block import Block
from verified_queue.checked import CheckedFreeBlockQueue
from verified_queue.cli.demo import run_demo
from verified_queue.cli.simulation import (
    DemoConfig,
    Request,
    Simulation,
    call_chain,
    queue_factory,
)
from verified_queue.errors import NotInQueueError, QueueError
from verified_queue.kvcache.block import KVCacheBlock
from verified_queue.kvcache.errors import BlockPoolError
from verified_queue.queue import FreeBlockQueue
from verified_queue.traced import TracedFreeBlockQueue

SMALL = DemoConfig(requests=60, blocks=300, seed=3)
#: The report's description of the checks run, in check mode.
CHECKS = re.compile(
    r"(?P<operations>[\d,]+) queue operations checked in O\(1\) before and after"
    r"(?P<traced> and traced)?, (?P<full>[\d,]+) full O\(n\) checks"
)


# --- the checks the report counts ------------------------------------------------------------


def test_the_trace_level_counts_the_same_checks_as_plain_check_mode() -> None:
    """A run traced and the same run untraced report the same operations and full checks.

    The trace level numbers its queue operations itself, and plain check mode counts
    each call it checks: the two counts of one workload agree, and only the traced one
    says it traced.
    """
    plain = run_demo(replace(SMALL, trace=False), io.StringIO()).queue_checks
    traced = run_demo(replace(SMALL, trace=True), io.StringIO()).queue_checks
    plain_match = CHECKS.fullmatch(plain)
    traced_match = CHECKS.fullmatch(traced)
    assert plain_match is not None, plain
    assert traced_match is not None, traced
    assert plain_match["traced"] is None
    assert traced_match["traced"] is not None
    assert plain_match["operations"] == traced_match["operations"]
    assert plain_match["full"] == traced_match["full"]
    assert int(plain_match["full"]) > 0  # 300 blocks: a full check every 1,000 operations


def test_queue_factory_builds_plain_check_mode_unless_asked_to_trace() -> None:
    """``queue_factory(True)`` builds checked queues, untraced, counting each operation once.

    Building the queue links its blocks (one operation); each later call is one more.
    ``trace=True`` builds traced queues, and the description says so.
    """
    factory, describe = queue_factory(True)
    blocks = [KVCacheBlock(index) for index in range(4)]
    queue = factory(blocks)
    assert isinstance(queue, CheckedFreeBlockQueue)
    assert not isinstance(queue, TracedFreeBlockQueue)
    first = queue.popleft()
    queue.append(first)
    taken = queue.popleft_n(2)
    queue.prepend_n(taken)
    queue.remove(blocks[3])
    queue.append_n([blocks[3]])
    assert describe() == "7 queue operations checked in O(1) before and after, 0 full O(n) checks"
    queue.full_check()
    assert describe().endswith(", 1 full O(n) checks")
    assert [block.block_id for block in queue] == [1, 2, 0, 3]
    traced_factory, traced_describe = queue_factory(True, trace=True)
    traced = traced_factory([KVCacheBlock(0)])
    assert isinstance(traced, TracedFreeBlockQueue)
    traced.full_check()
    assert traced_describe() == (
        "1 queue operations checked in O(1) before and after and traced, 1 full O(n) checks"
    )


@pytest.mark.parametrize("inject", [None, "double-free"])
def test_a_run_without_checks_never_claims_the_trace_level(inject: str | None) -> None:
    """With check mode off nothing is traced, and the opening line says only that."""
    out = io.StringIO()
    report = run_demo(replace(SMALL, checks=False, inject=inject), out)
    assert report.queue_checks == "off"
    assert out.getvalue().splitlines()[0].endswith(", check mode off (--no-checks)")


# --- progress and timing ---------------------------------------------------------------------


class FlushRecordingOutput(io.StringIO):
    """An output that records its writes and flushes, in order."""

    def __init__(self) -> None:
        """Start with no event recorded."""
        super().__init__()
        self.events: list[str] = []

    def write(self, text: str, /) -> int:
        """Record the write."""
        self.events.append(text)
        return super().write(text)

    def flush(self) -> None:
        """Record the flush."""
        self.events.append("<flush>")
        super().flush()


def test_progress_and_fault_lines_are_flushed_as_they_are_printed() -> None:
    """Each progress line and the fault line are flushed before anything else is written.

    A log piped elsewhere must show them as they happen, not when the run ends.
    """
    out = FlushRecordingOutput()
    run_demo(replace(SMALL, inject="double-free"), out)
    lines = [index for index, event in enumerate(out.events) if "%]" in event or "[fault]" in event]
    assert len(lines) == 6  # 10% to 50%, then the fault
    for index in lines:
        following = [event for event in out.events[index + 1 :] if event != "\n"]
        assert following[0] == "<flush>", out.events[index : index + 3]


def test_progress_lines_come_when_their_share_is_served_and_are_timed_within_the_run() -> None:
    """The N% line shows at least N% of the requests served, and a time within the run's."""
    out = io.StringIO()
    report = run_demo(SMALL, out)
    progress = [line for line in out.getvalue().splitlines() if "%]" in line]
    assert len(progress) == 10
    seconds = []
    for line in progress:
        match = re.match(r"\s*\[\s*(\d+)%\]\s+([\d,]+) served,.*,\s+([\d.]+) s$", line)
        assert match is not None, line
        percent, served = int(match[1]), int(match[2].replace(",", ""))
        assert served * 100 >= percent * SMALL.requests
        seconds.append(float(match[3]))
    assert seconds == sorted(seconds)
    assert seconds[-1] <= report.seconds + 0.05


def test_simulation_run_times_itself() -> None:
    """``Simulation.run`` returns its report with the seconds the run took."""
    started = time.perf_counter()
    report = Simulation(replace(SMALL, requests=10, checks=False), io.StringIO()).run()
    elapsed = time.perf_counter() - started
    assert 0.0 < report.seconds <= elapsed


def test_a_request_that_can_never_fit_ends_the_run_with_a_reason() -> None:
    """A waiting request that fits in no pool, with nothing running to wait for, is an error.

    The engine cannot make progress, so it raises instead of looping forever.
    """

    class NothingFits(Simulation):
        def _admit(self, request: Request) -> bool:  # noqa: ARG002 -- refuses every request
            """Refuse the request, as if it could never fit."""
            return False

    with pytest.raises(BlockPoolError) as raised:
        NothingFits(SMALL, io.StringIO()).run()
    assert str(raised.value) == "a waiting request can never fit in the pool"


# --- the planted bugs, to the block ----------------------------------------------------------


class RecordingFaults(Simulation):
    """The simulation, recording the prefix hit each planted bug of a hit is given."""

    def __init__(self, config: DemoConfig) -> None:
        """Build the simulation with nothing recorded."""
        super().__init__(config, io.StringIO())
        self.hit: list[KVCacheBlock] = []
        self.counts_before: list[int] = []
        self.counts_after: list[int] = []

    def _touch_with_planted_fault(self, request: Request, hit: list[KVCacheBlock]) -> None:
        """Record the hit and its blocks' counts, before and after the planted touch."""
        self.hit = list(hit)
        self.counts_before = [block.ref_cnt for block in hit]
        try:
            super()._touch_with_planted_fault(request, hit)
        finally:
            self.counts_after = [block.ref_cnt for block in self.hit]


def test_a_foreign_remove_resolves_the_last_hit_block_through_the_other_pool() -> None:
    """The foreign block is the other pool's block of the hit's last id, in its place.

    Every block of the hit before it is touched; touching the foreign one is refused
    with neither it nor our own block of that id changed.
    """
    simulation = RecordingFaults(replace(SMALL, inject="foreign-remove", trace=False))
    with pytest.raises(NotInQueueError) as raised:
        simulation.run()
    hit = simulation.hit
    assert hit, "planted on a prefix hit"
    last = hit[-1]
    assert f"remove(KVCacheBlock(block_id={last.block_id}, " in str(raised.value)
    expected_after = [count + 1 for count in simulation.counts_before[:-1]]
    assert simulation.counts_after[:-1] == expected_after
    assert simulation.counts_after[-1] == simulation.counts_before[-1]
    foreign = simulation.other_pool.blocks[last.block_id]
    assert foreign.ref_cnt == 0
    assert simulation.other_pool.get_num_free_blocks() == SMALL.blocks - 1


@pytest.mark.parametrize("seed", [2, 3])
def test_link_corruption_takes_a_free_cached_block_as_touch_would_but_unlinks_it_badly(
    seed: int,
) -> None:
    """The fast path counts every block of the hit as touched, the one it unlinks too.

    Unchecked, the run goes on with the block still linked behind its successor: the
    free queue's walk from the front no longer reaches it, while its neighbours still
    point at it.
    """
    simulation = RecordingFaults(
        replace(SMALL, blocks=400, seed=seed, inject="link-corruption", checks=False)
    )
    original = simulation._touch_with_planted_fault

    def stop_after_planting(request: Request, hit: list[KVCacheBlock]) -> None:
        """Make the touch, then stop the run if it planted the fault."""
        original(request, hit)
        if simulation.report.fault_planted is not None:
            raise _Planted

    simulation._touch_with_planted_fault = stop_after_planting  # type: ignore[method-assign]
    with pytest.raises(_Planted):
        simulation.run()
    assert simulation.counts_after == [count + 1 for count in simulation.counts_before]
    free_before = [
        block
        for block, count in zip(simulation.hit, simulation.counts_before, strict=True)
        if not count
    ]
    victim = free_before[0]
    walk = _walk_forward(simulation.pool.free_block_queue)
    assert all(block is not victim for block in walk)
    assert victim.prev_free_block is not None or victim.next_free_block is not None


class _Planted(Exception):
    """Raised to stop a run right after its fault is planted."""


def _walk_forward(queue: FreeBlockQueue[KVCacheBlock]) -> list[Block]:
    """Return the blocks reached by following ``next_free_block`` from the queue's front."""
    blocks: list[Block] = []
    block = queue.fake_free_list_head.next_free_block
    while block is not None and block is not queue.fake_free_list_tail:
        blocks.append(block)
        block = block.next_free_block
    return blocks


def test_the_other_pools_queue_is_checked_and_traced_like_ours() -> None:
    """A foreign block's history names where the other pool's traced queue linked it."""
    report = run_demo(replace(SMALL, inject="foreign-remove"), io.StringIO())
    assert "linked in another traced queue by: #1 append_n()" in report.result


# --- the call chain of a stop ----------------------------------------------------------------


def _raise_here() -> None:
    """Raise a queue error from outside the simulation."""
    raise QueueError("raised outside the simulation")


def _call_the_raiser() -> None:
    """Call the raiser, one frame deeper."""
    _raise_here()


def test_an_error_raised_outside_the_simulation_is_named_from_its_first_frame() -> None:
    """With no frame of the simulation, the chain is the whole traceback, no faulty call."""
    with pytest.raises(QueueError) as raised:
        _call_the_raiser()
    chain, at_faulty_call = call_chain(raised.value)
    assert not at_faulty_call
    assert [entry.split(" in ")[1].split(":")[0] for entry in chain] == [
        "test_an_error_raised_outside_the_simulation_is_named_from_its_first_frame",
        "_call_the_raiser",
        "_raise_here",
    ]


def test_a_faulty_call_is_named_with_the_line_that_made_it() -> None:
    """A stop at ``_faulty_call`` names its caller's line first, then the faulty call."""
    simulation = Simulation(SMALL, io.StringIO())

    def refuse(argument: int) -> None:
        """Refuse every call, as the pool refuses a faulty one."""
        raise QueueError(f"refused {argument}")

    with pytest.raises(QueueError) as raised:
        simulation._faulty_call(refuse, 7)
    chain, at_faulty_call = call_chain(raised.value)
    # The same error with the traceback cut to start at the faulty call itself.
    traceback = raised.value.__traceback__
    assert traceback is not None
    cut = QueueError(*raised.value.args).with_traceback(traceback.tb_next)
    cut_chain, cut_at_faulty_call = call_chain(cut)
    assert at_faulty_call
    assert "in test_a_faulty_call_is_named_with_the_line_that_made_it:" in chain[0]
    assert "in _faulty_call: call(argument)" in chain[1]
    assert "in refuse:" in chain[2]
    assert cut_at_faulty_call
    assert cut_chain == chain[1:]
