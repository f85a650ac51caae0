"""The scheduler workload of ``bench/vllm_bench.py``, and what every workload needs of vLLM.

vLLM 0.34.0's own ``Scheduler`` and ``KVCacheManager``, built by ``create_scheduler`` of
vLLM's ``tests/v1/core/utils.py`` (read from vLLM's sdist at run time, as ``tox -e
vllm-engine`` reads vLLM's tests: :mod:`conformance.engine` extracts them into the cache;
nothing of vLLM's is copied), with prefix caching on, serve the requests of a
:class:`Scenario` to completion: each step adds the requests arriving then, calls
``schedule()``, builds the model's output as vLLM's own scheduler tests do (a
``ModelRunnerOutput`` of the scheduled requests, one sampled token for each whose prompt
is all computed, none for a prefill chunk), and passes it to ``update_from_output()``.
Requests share a few long prefixes and few run at once, so a prefix's blocks go back to
the free queue between its requests, a prefix-cache hit takes them out again
(``remove``), and with few blocks, new requests evict cached ones; the report counts both
in an untimed run (:func:`census`). A sample is one whole run on a fresh scheduler, built
while vLLM's ``block_pool`` binds the queue under test; it times ``add_request``, ``schedule()`` and
``update_from_output()`` (not the building of the fake output) and reports the time per
step. Every subject's runs are compared: the same number of steps and the same free
list at the end.

Like :mod:`conformance.engine_pytest`, this gives vLLM's ``UnspecifiedPlatform`` the
device type ``cpu``, so that vLLM's configs build with no accelerator, and it points
Hugging Face at the offline cache that holds ``facebook/opt-125m``'s public config.
"""

from __future__ import annotations

import importlib
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.vllm_bench import (
    UNITS,
    Settings,
    Subject,
    build_with,
    check_queue,
    free_ids,
    rotated,
    same_free_lists,
)
from bench.workloads import WorkloadResult, collector_off
from conformance import engine

__all__ = ["Environment", "Scenario", "prepare", "run_scheduler"]

#: vLLM's release this benchmark is written for (its sdist's test helpers are loaded).
VLLM_VERSION = "0.34.0"
#: Tokens per KV-cache block, of the scheduler and of the requests' block hashes.
BLOCK_SIZE = 16


@dataclass(frozen=True, slots=True)
class Environment:
    """vLLM, loaded: its version, the modules of its KV-cache core, its test helpers."""

    version: str
    block_pool: Any
    kv_cache_utils: Any
    create_scheduler: Any
    request_class: Any
    sampling_params: Any
    model_runner_output: Any
    block_hasher: Any


def prepare(cache: Path) -> Environment:
    """Load vLLM and ``create_scheduler`` of its sdist's tests (extracted into ``cache`` once).

    Raises ``SystemExit`` when vLLM is not the release this benchmark is written for, or
    torch is not a CPU build.
    """
    try:
        version = metadata.version("vllm")
    except metadata.PackageNotFoundError:
        raise SystemExit(
            "bench vllm: vLLM is not installed; tox -e bench-vllm installs it"
        ) from None
    if version != VLLM_VERSION:
        raise SystemExit(f"bench vllm: vLLM {version} is installed; this measures {VLLM_VERSION}")
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = "absent"
    if not torch.endswith("+cpu"):
        raise SystemExit("bench vllm: torch is not a CPU build: install torch==2.13.0+cpu")
    cache = cache.resolve()
    root = engine._extract_tests(cache, version)
    home = engine._hub_cache(cache)
    # Before vLLM and Hugging Face are imported: both read these once, at import.
    os.environ.update(HF_HOME=str(home), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    interface: Any = importlib.import_module("vllm.platforms.interface")
    interface.UnspecifiedPlatform.device_type = "cpu"
    interface.UnspecifiedPlatform.support_hybrid_kv_cache = classmethod(lambda _cls: True)
    # vLLM's tests import one another as the package ``tests``: the sdist's root goes first.
    sys.path.insert(0, str(root))
    utils = importlib.import_module("tests.v1.core.utils")
    hashing = importlib.import_module("vllm.utils.hashing")
    kv_cache_utils = importlib.import_module("vllm.v1.core.kv_cache_utils")
    kv_cache_utils.init_none_hash(hashing.sha256)
    return Environment(
        version=version,
        block_pool=importlib.import_module("vllm.v1.core.block_pool"),
        kv_cache_utils=kv_cache_utils,
        create_scheduler=utils.create_scheduler,
        request_class=importlib.import_module("vllm.v1.request").Request,
        sampling_params=importlib.import_module("vllm.sampling_params").SamplingParams,
        model_runner_output=importlib.import_module("vllm.v1.outputs").ModelRunnerOutput,
        block_hasher=kv_cache_utils.get_request_block_hasher(BLOCK_SIZE, hashing.sha256),
    )


@dataclass(frozen=True, slots=True)
class Scenario:
    """The requests one sample serves, and the scheduler that serves them."""

    requests: int = 200
    seed: int = 0
    #: Prompts open with one of this many prefixes of ``prefix_blocks`` full blocks.
    prefixes: int = 16
    prefix_blocks: int = 8
    #: The rest of a prompt, and the tokens each request generates: uniform in these ranges.
    suffix_tokens: tuple[int, int] = (8, 64)
    output_tokens: tuple[int, int] = (8, 32)
    #: Requests added before each step, until all are in.
    arrivals_per_step: int = 4
    #: ``create_scheduler``'s settings: few enough running requests that a prefix's blocks go
    #: back to the free queue between its requests (a later hit takes them out again), and few
    #: enough blocks that cached ones are evicted.
    num_blocks: int = 512
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 2048
    #: The token every request samples (not vLLM's end-of-sequence token, 50256).
    sampled_token: int = 7

    def describe(self) -> str:
        """Return the scenario as a sentence for the report."""
        return (
            f"create_scheduler(enable_prefix_caching=True, num_blocks={self.num_blocks}, "
            f"block_size={BLOCK_SIZE}, max_num_seqs={self.max_num_seqs}, "
            f"max_num_batched_tokens={self.max_num_batched_tokens}) of vLLM's "
            f"tests/v1/core/utils.py; {self.requests} requests, {self.arrivals_per_step} "
            f"arriving per step, each prompt one of {self.prefixes} shared prefixes of "
            f"{self.prefix_blocks} blocks and {self.suffix_tokens[0]} to "
            f"{self.suffix_tokens[1]} tokens of its own, {self.output_tokens[0]} to "
            f"{self.output_tokens[1]} tokens generated (seed {self.seed})"
        )


def _requests(environment: Environment, scenario: Scenario) -> list[Any]:
    """The scenario's requests, new (a run changes them), the same for every subject."""
    rng = random.Random(scenario.seed)
    prefix_length = scenario.prefix_blocks * BLOCK_SIZE
    prefixes = [[1000 + group] * prefix_length for group in range(scenario.prefixes)]
    requests = []
    for index in range(scenario.requests):
        sampling = environment.sampling_params(
            ignore_eos=True, max_tokens=rng.randint(*scenario.output_tokens)
        )
        sampling.update_from_generation_config({}, 50256)
        own = [rng.randrange(50_000) for _ in range(rng.randint(*scenario.suffix_tokens))]
        requests.append(
            environment.request_class(
                request_id=str(index),
                prompt_token_ids=prefixes[rng.randrange(scenario.prefixes)] + own,
                sampling_params=sampling,
                pooling_params=None,
                block_hasher=environment.block_hasher,
            )
        )
    return requests


@dataclass(frozen=True, slots=True)
class _Run:
    """One sample: its time per step, and what must be the same for every queue."""

    seconds_per_step: float
    steps: int
    free_list: list[int]
    queried: int
    hits: int


def _serve(
    scheduler: Any, requests: list[Any], environment: Environment, scenario: Scenario
) -> _Run:
    """Serve ``requests`` to completion; time the scheduler's own calls."""
    pending = list(requests)
    output_class = environment.model_runner_output
    token = [scenario.sampled_token]
    timed = 0.0
    steps = queried = hits = 0
    while pending or scheduler.has_unfinished_requests():
        start = time.perf_counter()
        for request in pending[: scenario.arrivals_per_step]:
            scheduler.add_request(request)
        del pending[: scenario.arrivals_per_step]
        scheduled = scheduler.schedule()
        between = time.perf_counter()
        req_ids = list(scheduled.num_scheduled_tokens)
        sampled = []
        for req_id in req_ids:
            request = scheduler.requests[req_id]
            # The model samples once the prompt is all computed; a prefill chunk samples none.
            sampled.append(token if request.num_computed_tokens >= request.num_tokens else [])
        output = output_class(req_ids=req_ids, sampled_token_ids=sampled)
        resumed = time.perf_counter()
        outputs = scheduler.update_from_output(scheduled, output)
        timed += (between - start) + (time.perf_counter() - resumed)
        steps += 1
        for engine_output in outputs.values():
            stats = engine_output.scheduler_stats
            if stats is not None:
                queried += stats.prefix_cache_stats.queries
                hits += stats.prefix_cache_stats.hits
        if steps > 100 * len(requests):
            raise RuntimeError("scheduler: the requests did not finish")
    unfinished = [r.request_id for r in requests if len(r.output_token_ids) != r.max_tokens]
    if unfinished:
        raise RuntimeError(f"scheduler: requests {unfinished[:5]} ended short of their tokens")
    pool = scheduler.kv_cache_manager.block_pool
    return _Run(timed / steps, steps, free_ids(pool), queried, hits)


def census(environment: Environment, scenario: Scenario) -> tuple[int, int]:
    """Serve the scenario once on vLLM's own queue, untimed; count its hits on free blocks.

    Returns how many cached blocks a prefix-cache hit took out of the free queue
    (``remove``) and how many cached blocks were evicted for new ones: the queue
    operations beyond ``popleft_n``, ``append_n`` and ``prepend_n`` that the workload
    exercises. The counters wrap the methods of this one scheduler's pool and queue.
    """
    scheduler = environment.create_scheduler(
        enable_prefix_caching=True,
        num_blocks=scenario.num_blocks,
        block_size=BLOCK_SIZE,
        max_num_seqs=scenario.max_num_seqs,
        max_num_batched_tokens=scenario.max_num_batched_tokens,
    )
    pool = scheduler.kv_cache_manager.block_pool
    counts = {"remove": 0, "evicted": 0}
    remove = pool.free_block_queue.remove
    evict = pool._maybe_evict_cached_block

    def counted_remove(block: Any) -> None:
        counts["remove"] += 1
        remove(block)

    def counted_evict(block: Any) -> bool:
        evicted = bool(evict(block))
        counts["evicted"] += evicted
        return evicted

    pool.free_block_queue.remove = counted_remove
    pool._maybe_evict_cached_block = counted_evict
    _serve(scheduler, _requests(environment, scenario), environment, scenario)
    return counts["remove"], counts["evicted"]


def run_scheduler(
    environment: Environment, subjects: Sequence[Subject], settings: Settings, scenario: Scenario
) -> tuple[WorkloadResult, str]:
    """Serve the scenario once per subject and repetition, interleaved; return the times.

    Also returns a line saying how many steps a run took and how many of the prompt
    tokens the prefix cache was asked for it held. Raises ``RuntimeError`` if two runs
    differ in their steps or their final free list.
    """
    result = WorkloadResult("scheduler", UNITS["scheduler"])
    seen: dict[str, _Run] = {}
    for repetition in range(settings.repetitions):
        for subject in rotated(subjects, repetition):
            scheduler = build_with(
                environment.block_pool,
                subject,
                lambda: environment.create_scheduler(
                    enable_prefix_caching=True,
                    num_blocks=scenario.num_blocks,
                    block_size=BLOCK_SIZE,
                    max_num_seqs=scenario.max_num_seqs,
                    max_num_batched_tokens=scenario.max_num_batched_tokens,
                ),
            )
            check_queue(scheduler.kv_cache_manager.block_pool, subject)
            requests = _requests(environment, scenario)
            with collector_off():
                done = _serve(scheduler, requests, environment, scenario)
            result.record(subject.name, scenario.requests, done.seconds_per_step)
            first = seen.setdefault(subject.name, done)
            if (done.steps, done.free_list) != (first.steps, first.free_list):
                raise RuntimeError(f"scheduler: {subject.name} ran differently between repetitions")
    result.finish()
    same_free_lists("scheduler", {name: run.free_list for name, run in seen.items()})
    steps = {run.steps for run in seen.values()}
    if len(steps) != 1:
        raise RuntimeError(f"scheduler: the queues took different numbers of steps: {steps}")
    run = next(iter(seen.values()))
    share = run.hits / run.queried if run.queried else 0.0
    removed, evicted = census(environment, scenario)
    facts = (
        f"{run.steps} steps per run; the prefix cache held {share:.0%} of the "
        f"{run.queried:,} prompt tokens looked up; in a run on vLLM's queue, untimed, hits "
        f"took {removed:,} cached blocks out of the free queue and {evicted:,} were evicted"
    )
    return result, facts
