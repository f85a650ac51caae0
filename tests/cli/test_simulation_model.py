"""The simulated engine does, step by step, what the demo's page says an engine does.

Each run here is a :class:`Simulation` whose every admission, decoding step, preemption
and finish is checked against a model computed independently in the test: the prompt's
keys and the cache's content give the hit an admission must make and the blocks it must
take; every running request decodes one new token a step; a request is preempted only
when the pool is dry, the latest admitted first; and the report's counts are the counts
of what happened. The runs cover several seeds, block sizes and pools, from ones where
every request fits at once to ones a single request fills.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pytest

from verified_queue.cli import simulation
from verified_queue.cli.demo import run_demo
from verified_queue.cli.simulation import MIN_CAPACITY, DemoConfig, Request, Simulation
from verified_queue.kvcache.block import KVCacheBlock
from verified_queue.kvcache.keys import (
    BlockHash,
    hash_block_tokens,
    hash_request_tokens,
    key_function_by_name,
)
from verified_queue.kvcache.pool import BlockPool, QueueFactory

#: Workloads small enough for a few tenths of a second each, varied enough between them to
#: give hits, evictions, preemptions, requests cut to fit the pool, prompts shorter than a
#: block, and (``max_running``) a full batch.
CONFIGS = [
    DemoConfig(requests=60, blocks=1024, seed=3, checks=False),
    DemoConfig(requests=60, blocks=300, seed=5, checks=False, key_function="builtin"),
    DemoConfig(requests=40, blocks=200, block_size=8, seed=1, checks=False, max_running=3),
    DemoConfig(requests=30, blocks=5, block_size=64, seed=2, checks=False),
    DemoConfig(requests=12, blocks=3, block_size=1, seed=4, checks=False),
    DemoConfig(requests=25, blocks=40, block_size=4, seed=6, arrivals_per_step=8),
]


def _ceil_div(numerator: int, denominator: int) -> int:
    """Return ``numerator / denominator`` rounded up: the blocks ``numerator`` tokens start."""
    return -(-numerator // denominator)


class CountingPool(BlockPool):
    """A block pool that counts the calls made to it: the calls the report counts."""

    __slots__ = ("calls",)

    #: The pools built since the test began, in order: a simulation's own pool first.
    instances: list[CountingPool] = []  # noqa: RUF012 -- a registry shared by the class
    calls: int

    def __init__(self, num_blocks: int, *, queue_factory: QueueFactory | None = None) -> None:
        """Build the pool, with no call counted."""
        super().__init__(num_blocks, queue_factory=queue_factory)
        self.calls = 0
        CountingPool.instances.append(self)

    def find_longest_cache_hit(self, block_hashes: Iterable[BlockHash]) -> list[KVCacheBlock]:
        """Count the call; look the hit up."""
        self.calls += 1
        return super().find_longest_cache_hit(block_hashes)

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Count the call; touch the blocks."""
        self.calls += 1
        super().touch(blocks)

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Count the call; allocate."""
        self.calls += 1
        return super().get_new_blocks(num_blocks)

    def cache_full_blocks(
        self,
        blocks: Sequence[KVCacheBlock],
        block_hashes: Sequence[BlockHash],
        num_cached_blocks: int,
        num_full_blocks: int,
    ) -> None:
        """Count the call; cache the blocks."""
        self.calls += 1
        super().cache_full_blocks(blocks, block_hashes, num_cached_blocks, num_full_blocks)

    def free_blocks(
        self, ordered_blocks: Iterable[KVCacheBlock], evict_first: bool = False
    ) -> None:
        """Count the call; free the blocks."""
        self.calls += 1
        super().free_blocks(ordered_blocks, evict_first)


@pytest.fixture(autouse=True)
def counting_pools(monkeypatch: pytest.MonkeyPatch) -> None:
    """Build the simulations' pools as counting pools."""
    monkeypatch.setattr(simulation, "BlockPool", CountingPool)
    monkeypatch.setattr(CountingPool, "instances", [])


@dataclass
class Expected:
    """What the model expects of the run so far, counted independently of the report."""

    prompt_tokens: int = 0
    prompt_tokens_hit: int = 0
    admissions: int = 0
    steps: int = 0
    preemptions: int = 0
    finished: int = 0


class ModelCheckedSimulation(Simulation):
    """The simulation, each of its moves checked against the model as it is made."""

    def __init__(self, config: DemoConfig) -> None:
        """Build the simulation and the model's records, empty."""
        super().__init__(config, io.StringIO())
        self.expected = Expected()
        self.model_key_function = key_function_by_name(config.key_function)
        #: Every token id of every text drawn or generated so far.
        self.tokens_seen: set[int] = set()
        #: The order of admission of each request running (its latest admission).
        self.admitted_as: dict[int, int] = {}
        self.preempted_this_step: list[Request] = []
        self.finished_this_step: list[Request] = []
        self.most_running = 0

    def _keys(self, tokens: list[int]) -> list[BlockHash]:
        """The keys of the full blocks of ``tokens``, computed afresh."""
        return hash_request_tokens(tokens, self.config.block_size, self.model_key_function)

    def _new_request(self) -> Request:
        """Check that a new request is a system prompt, maybe a document, text of its own."""
        request = super()._new_request()
        prompt = request.token_ids
        assert len(prompt) == request.num_prompt_tokens >= 1
        assert request.max_output_tokens >= 1
        # At most a quarter of the pool's token slots (block 0 is the null block), or two.
        quarter = (self.config.blocks - 1) * self.config.block_size // 4
        assert len(prompt) + request.max_output_tokens <= max(MIN_CAPACITY, quarter)
        # The prompt opens with a system prompt, or with all of it the request has room for.
        assert any(
            prompt[: len(system)] == system[: len(prompt)] for system in self.system_prompts
        ), "the prompt does not start with a system prompt"
        own = [token for token in prompt if token >= simulation._UNIQUE_TOKENS_START]
        assert not self.tokens_seen.intersection(own), "a request's own text is not its own"
        # The prompt is its shared text then its own: each shared text is one of the run's.
        shared = prompt[: len(prompt) - len(own)]
        texts = [tuple(text) for text in self.system_prompts + self.documents]
        rest = shared
        while rest:
            text = next((text for text in texts if tuple(rest[: len(text)]) == text), None)
            if text is None:
                assert tuple(rest) in {text[: len(rest)] for text in texts}, "unknown text"
                break
            rest = rest[len(text) :]
        if len(prompt) + request.max_output_tokens < self.max_request_tokens:
            assert own, "a request that was not cut to fit has no text of its own"
        self.tokens_seen.update(prompt)
        return request

    def _admit(self, request: Request) -> bool:
        """Check the admission against the model: the hit, the blocks taken, the decision."""
        pool = self.pool
        size = self.config.block_size
        tokens = list(request.token_ids)
        keys = self._keys(tokens)
        # The last prompt token is always recomputed, so its block is never a hit.
        hit: list[KVCacheBlock] = []
        for key in keys[: (len(tokens) - 1) // size]:
            block = pool.get_cached_block(key)
            if block is None:
                break
            hit.append(block)
        needed = _ceil_div(len(tokens), size) - len(hit)
        taken_from_queue = needed + sum(1 for block in hit if block.ref_cnt == 0)
        fits = taken_from_queue <= pool.get_num_free_blocks()
        first_admission = not request.preempted
        touched, allocated, free = pool.num_touched, pool.num_allocated, pool.get_num_free_blocks()

        admitted = super()._admit(request)

        assert admitted == fits, (admitted, taken_from_queue, free)
        assert request.hashes == keys
        if not admitted:
            assert (pool.num_touched, pool.num_allocated) == (touched, allocated)
            return admitted
        assert pool.num_touched - touched == len(hit)
        assert pool.num_allocated - allocated == needed
        assert pool.get_num_free_blocks() == free - taken_from_queue
        assert len(request.blocks) == _ceil_div(len(tokens), size)
        assert all(mine is cached for mine, cached in zip(request.blocks, hit, strict=False))
        self._check_block_table(request, len(request.hashes))
        self.expected.admissions += 1
        self.admitted_as[id(request)] = self.expected.admissions
        if first_admission:
            self.expected.prompt_tokens += len(tokens)
            self.expected.prompt_tokens_hit += len(hit) * size
        return admitted

    def _check_block_table(self, request: Request, checked_keys: int) -> None:
        """Check that ``request`` holds a block per started block, its full ones cached.

        The keys of the first ``checked_keys`` blocks were checked before: only the later
        ones are computed again, from their parent's key.
        """
        size = self.config.block_size
        tokens = request.token_ids
        assert len(request.blocks) == _ceil_div(len(tokens), size)
        assert request.num_cached_blocks == len(request.hashes) == len(tokens) // size
        for index in range(checked_keys, len(request.hashes)):
            parent = request.hashes[index - 1] if index else None
            block_tokens = tokens[index * size : (index + 1) * size]
            expected = hash_block_tokens(parent, block_tokens, self.model_key_function)
            assert request.hashes[index] == expected
            assert request.blocks[index].block_hash == expected
        assert request.blocks[-1].ref_cnt >= 1

    def _decode_step(self) -> None:
        """Check that every running request gains exactly one new token, or is preempted."""
        self.most_running = max(self.most_running, len(self.running))
        assert len(self.running) <= self.config.max_running
        before = {id(request): len(request.token_ids) for request in self.running}
        keys_before = {id(request): len(request.hashes) for request in self.running}
        self.preempted_this_step = []
        self.finished_this_step = []

        super()._decode_step()

        self.expected.steps += 1
        preempted = {id(request) for request in self.preempted_this_step}
        for request in self.running + self.finished_this_step:
            assert len(request.token_ids) == before[id(request)] + 1
            new = request.token_ids[-1]
            assert new not in self.tokens_seen, "a generated token is not new"
            self.tokens_seen.add(new)
            assert id(request) not in preempted
        for request in self.preempted_this_step:
            assert len(request.token_ids) == before[id(request)]
        for request in self.running:
            self._check_block_table(request, keys_before[id(request)])

    def _preempt(self, request: Request) -> None:
        """Check that the pool is dry and ``request`` is the latest admitted still running."""
        assert self.pool.get_num_free_blocks() == 0, "preempted with blocks free"
        assert request not in self.running
        latest = max(self.admitted_as[id(other)] for other in [*self.running, request])
        assert self.admitted_as[id(request)] == latest, "preempted one admitted earlier"
        super()._preempt(request)
        assert request.blocks == []
        assert request.num_cached_blocks == 0
        assert self.waiting[0] is request
        self.expected.preemptions += 1
        self.preempted_this_step.append(request)

    def _finish(self, request: Request) -> None:
        """Check that a finished request produced exactly its output, then frees it all."""
        assert len(request.token_ids) - request.num_prompt_tokens == request.max_output_tokens
        free = self.pool.get_num_free_blocks()
        released = sum(1 for block in request.blocks if block.ref_cnt == 1)
        super()._finish(request)
        assert self.pool.get_num_free_blocks() == free + released
        self.expected.finished += 1
        self.finished_this_step.append(request)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda config: f"seed{config.seed}")
def test_every_move_matches_the_model_and_the_report_counts_what_happened(
    config: DemoConfig,
) -> None:
    """Each admission, decoding step, preemption and finish does what the model expects.

    Then the report's steps, preemptions, prompt tokens and their hits, and pool calls are
    the model's counts (pool calls: the calls the pool received), every request is served
    and every block is free again.
    """
    simulation_run = ModelCheckedSimulation(config)
    report = simulation_run.run()
    expected = simulation_run.expected
    assert report.requests_served == config.requests == expected.finished
    assert not simulation_run.waiting
    assert not simulation_run.running
    assert report.steps == expected.steps
    assert report.preemptions == expected.preemptions
    assert report.prompt_tokens == expected.prompt_tokens
    assert report.prompt_tokens_hit == expected.prompt_tokens_hit
    assert isinstance(report.prompt_tokens_hit, int)
    pool = simulation_run.pool
    assert isinstance(pool, CountingPool)
    assert report.pool_calls == pool.calls
    assert pool.get_num_free_blocks() == config.blocks - 1


# --- the planted faults ----------------------------------------------------------------------

#: How each fault ends, as the main-job page's table says, with check mode on and off.
STOPS = {
    ("double-free", True): r"STOPPED at the faulty call, by DoubleFreeError: .*\(a double free\?\)",
    (
        "double-free",
        False,
    ): r"STOPPED at the faulty call, by DoubleFreeError: .*\(a double free\?\)",
    ("foreign-remove", True): (
        r"STOPPED at the faulty call, by NotInQueueError: .*: it is linked in another queue"
    ),
    ("foreign-remove", False): r"DAMAGED: the end-of-run audit found: the free queue holds",
    # At the first queue operation to meet the damaged link: in the planting call, or in a
    # later one when no other free block of the hit is taken out of the queue with it.
    ("link-corruption", True): (
        r"STOPPED (within the pool call that planted the link-corruption|[\d,]+ pool calls "
        r"after the link-corruption was planted), by InvariantViolation: I1 \(sentinel_linkage\)"
    ),
    # Far from its cause, or only at the end.
    ("link-corruption", False): r"(STOPPED|CRASHED) [\d,]+ pool calls after|DAMAGED",
}
#: The simulation's line that makes each fault's call into the pool.
FAULTY_CALLER = {
    "double-free": "in _finish:",
    "foreign-remove": "in _touch_with_planted_fault:",
    "link-corruption": "in _touch_with_planted_fault:",
}


@pytest.mark.parametrize("seed", [0, 2])
@pytest.mark.parametrize(("fault", "checks"), sorted(STOPS))
def test_each_fault_is_planted_once_at_half_and_caught_where_the_docs_say(
    fault: str, checks: bool, seed: int
) -> None:
    """A fault is planted once, after the 50% line, and ends the run as documented.

    A double free is planted at the first finish after half the requests are served. The
    report's pool calls are the calls the pool received, whatever the fault. A stop names
    the simulation's line that made the pool call (with the faulty call's own frame), then
    only the pool's and the queue's frames: the check-mode wrappers of the simulation's
    queue are no callers.
    """
    config = DemoConfig(
        requests=60, blocks=400, seed=seed, inject=fault, checks=checks, trace=False
    )
    out = io.StringIO()
    report = run_demo(config, out)
    lines = out.getvalue().splitlines()
    planted = [index for index, line in enumerate(lines) if "[fault] planting" in line]
    assert len(planted) == 1, "a fault is planted once per run"
    assert f"planting {fault} at request" in lines[planted[0]]
    match = re.search(r"\(([\d,]+) served so far\)", lines[planted[0]])
    assert match is not None
    served_at_fault = int(match[1].replace(",", ""))
    (half,) = [index for index, line in enumerate(lines) if "[ 50%]" in line]
    assert half < planted[0]
    half_match = re.search(r"([\d,]+) served", lines[half])
    assert half_match is not None
    served_at_half = int(half_match[1].replace(",", ""))
    assert served_at_half * 2 >= config.requests
    assert served_at_half <= served_at_fault
    if fault == "double-free":
        assert served_at_fault == served_at_half + 1
    assert report.fault_planted == fault
    assert report.status == 1
    assert re.match(STOPS[fault, checks], report.result), report.result
    # Every call made, and no other: both frees of a double free, the faulty touch once, and
    # a call that raised (a failed call into the pool is still a call), not the one after it.
    assert report.pool_calls == CountingPool.instances[0].calls
    ours = [frame for frame in report.stopped_at if "simulation.py:" in frame]
    if "at the faulty call" in report.result:
        assert ours == report.stopped_at[:2]
        assert FAULTY_CALLER[fault] in ours[0]
        assert "in _faulty_call: call(argument)" in ours[1]
    elif report.result.startswith("STOPPED"):
        assert ours == report.stopped_at[:1]
    if "within the pool call" in report.result:
        assert "in _touch_with_planted_fault: self.pool.touch(" in ours[0]
    if report.result.startswith("DAMAGED"):
        assert report.requests_served == config.requests
