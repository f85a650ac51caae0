"""A stateful fuzzer of vLLM 0.34.0's real ``Scheduler``, with check mode seeing the whole pool.

A Hypothesis ``RuleBasedStateMachine`` drives vLLM's own ``Scheduler`` and
``KVCacheManager``, built by ``create_scheduler`` of vLLM's ``tests/v1/core/utils.py``
(read from vLLM's sdist at run time by :func:`bench.vllm_scheduler.prepare`; nothing
of vLLM's is copied), with the plugin loaded as vLLM's engine loads it
(``VERIFIED_QUEUE_VLLM=checked``, then ``vllm.plugins.load_general_plugins()``). Its
rules add requests (prompts opening with one of a few shared prefixes, lengths
around block boundaries, random ``max_tokens``, some stopped by EOS or a stop
token), step the scheduler (``schedule()``, then ``update_from_output()`` with a
faked model output, as vLLM's scheduler tests build it; with async scheduling two
steps may be in flight), abort requests (``finish_requests``) and reset the
prefix cache. The pool is small, so requests are preempted, and the token budget
too, so prompts are prefilled in chunks. With a KV connector (vLLM's test
``MockKVConnector``, loading from outside synchronously or asynchronously) a rule
also says how the connector's transfers end: loads done, failed (``failed_recving``)
or with bad blocks (``invalid_block_ids``), and sends of finished requests' KV done
(``finished_sending``), each reported with the next model output. With vLLM's CPU
offloading connector (``SimpleCPUOffloadConnector``, its scheduler side and its CPU
``BlockPool`` as vLLM builds them) a rule says how many of the oldest loads from the
CPU and stores to it end at each output, as its workers report them, and a reset
may reset the CPU cache too. With speculative decoding a rule says how many draft
tokens each request is given (``update_draft_token_ids``) and how many of those
scheduled the model accepts.

After every rule it checks, beyond what check mode checks at each link and
unlink:

* vLLM's pool clauses P1, P2, P3, P5 over the whole pool
  (``free_block_queue.check_block_pool()``);
* a reference-count oracle computed from outside the pool: each block's
  ``ref_cnt`` is the number of places that hold it (the block tables of every
  group's single-type manager, ``req_to_blocks``, and the scheduler's deferred
  frees), the null block excepted (:func:`holder_problems`);
* no block held by two requests unless it is a cached full block;
* with a connector, no block free while a transfer still uses it: an
  asynchronous load writing into it, or a finished request's send reading it
  (:func:`transfer_problems`); with CPU offloading, no GPU or CPU block free while
  a load or store the workers were handed still copies it
  (:func:`offload_problems`), the offloader's own holds counted in both pools' oracle,
  and check mode's pool check on the CPU pool too.

At the end of each example every request is aborted and the scheduler run until
nothing is left: then every block but the null block must be free, and the
prefix cache coherent (:func:`cache_problems`). A violation fails the example,
and Hypothesis shrinks it to a short sequence of rules.

:data:`CONFIGS` are the schedulers it drives: full attention with prefix caching
on and off, a hybrid of a full-attention and a sliding-window group, async
scheduling (alone and hybrid), a KV connector loading synchronously or
asynchronously (a failed load recomputed, or failing its request), CPU offloading
(eager and lazy stores), and speculative decoding (alone and hybrid). :data:`PLANTED`
are allocator bugs of the classes vLLM and its neighbours shipped, each patched
into vLLM's classes for one run (vLLM's files are never edited);
``tests/vllm/test_fuzz_scheduler_vllm.py`` asserts that the fuzzer finds each
within a stated number of examples.

Usage, where vLLM 0.34.0 and torch's CPU build are installed (``tox -e fuzz-vllm``)::

    python -I tests/vllm/fuzz_scheduler.py --cache .tox/vllm-engine-cache --quick
    python -I tests/vllm/fuzz_scheduler.py --budget 1200 --coverage
    python -I tests/vllm/fuzz_scheduler.py --planted

Against your own fix or connector, the same command with ``--patch my_fix.py`` (a
file run once vLLM is loaded, which rebinds what the fix changes) or ``--connector
my_package.module:MyConnector`` (its scheduler side stands in for vLLM's mock in
the connector configurations).

``--quick`` (the default) runs a fixed, derandomized number of examples of each
configuration in a few minutes; ``--budget SECONDS`` shares that many seconds
among the configurations, with random examples; ``--coverage`` reports which lines
of vLLM's KV-cache core and scheduler the run reached; ``--planted`` runs each
planted bug under check mode, under vLLM's own queue with the outside checks only,
and under vLLM's own queue with no check at all, and says what each found.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import runpy
import sys
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    # Run as a script with -I, so that the installed wheel is what runs; bench/ and
    # conformance/ are not shipped, so the checkout goes at the end of the path.
    sys.path.append(str(Path(__file__).resolve().parents[2]))

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.reporting import with_reporter
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

__all__ = [
    "CHECK_LEVELS",
    "CONFIGS",
    "PLANTED",
    "Config",
    "Options",
    "Stats",
    "cache_problems",
    "holder_problems",
    "machine_class",
    "main",
    "offload_problems",
    "parse_arguments",
    "prompt_tokens",
    "transfer_problems",
]

#: Tokens per KV-cache block: small, so that short prompts span several blocks.
BLOCK_SIZE = 4
#: The token every request samples unless the rule draws an end: not a stop token.
SAMPLED_TOKEN = 7
#: The stop token some requests are given (``stop_token_ids``).
STOP_TOKEN = 13
#: Shared prompt prefixes, and their length in blocks: requests that open alike share blocks.
PREFIXES = 3
PREFIX_BLOCKS = 5
#: The longest generation a request asks for.
MAX_TOKENS = 12
#: Prompt tokens the connector offers each request from outside (capped as a real one caps them).
CONNECTOR_TOKENS = 2 * BLOCK_SIZE
#: What the connector's workers report of a load at a model output: ``done`` (loaded),
#: ``failed`` (the request's load failed: ``failed_recving``), ``invalid`` (some of its
#: loaded blocks are bad: ``invalid_block_ids``); a load not reported yet is still in flight.
TRANSFER_OUTCOMES = ("done", "failed", "invalid")
#: The connectors that are vLLM's test ``MockKVConnector`` (``Config.connector``).
MOCK_CONNECTORS = ("sync", "async")
#: How a request must have finished for the connector to send its KV on: by itself.
SENT_ON = frozenset({"FINISHED_STOPPED", "FINISHED_LENGTH_CAPPED"})
#: What the checks after each rule include. ``all``: check mode's whole-pool check, the
#: outside oracle, the end checks; ``outside``: the oracle and the end checks only (for
#: vLLM's own queue); ``none``: nothing, so only vLLM's own asserts and errors can fail a run.
CHECK_LEVELS = ("all", "outside", "none")
#: vLLM's files whose line coverage ``--coverage`` reports (paths inside the vllm package).
COVERED_FILES = (
    "v1/core/block_pool.py",
    "v1/core/kv_cache_manager.py",
    "v1/core/kv_cache_coordinator.py",
    "v1/core/single_type_kv_cache_manager.py",
    "v1/core/sched/scheduler.py",
)
#: Where ``tox -e vllm-engine`` keeps vLLM's sdist and its extracted tests.
DEFAULT_CACHE = Path(__file__).resolve().parents[2] / ".tox" / "vllm-engine-cache"


# ---------------------------------------------------------------------------
# The pure parts: the configurations, the prompts, the oracle, the options.


@dataclass(frozen=True, slots=True)
class Config:
    """One scheduler the machine drives: ``create_scheduler``'s settings, and a second group."""

    name: str
    prefix_caching: bool
    #: Tokens of a sliding-window group's window beside the full-attention group (``None``: none).
    sliding_window: int | None = None
    async_scheduling: bool = False
    #: Few blocks, so that requests are preempted and cached blocks evicted.
    num_blocks: int = 12
    #: A small token budget, so that prompts are prefilled in several chunks.
    max_num_batched_tokens: int = 16
    max_num_seqs: int = 4
    max_model_len: int = 64
    #: A KV connector beside the pool. vLLM's test ``MockKVConnector``: ``"sync"`` loads
    #: prompt tokens from outside in the step that schedules them, ``"async"`` over later
    #: steps (``WAITING_FOR_REMOTE_KVS``). ``"cpu-offload"``: vLLM's
    #: ``SimpleCPUOffloadConnector``, its scheduler side as vLLM builds it (a second
    #: ``BlockPool`` of CPU blocks, on the checked queue too), storing blocks to CPU and
    #: loading prefix hits back. ``None``: no connector.
    connector: str | None = None
    #: What the scheduler does with a load that failed (``kv_load_failure_policy``):
    #: ``"recompute"`` the tokens, or ``"fail"`` the request.
    load_failure_policy: str = "recompute"
    #: The most draft tokens a request is given per step (speculative decoding, vLLM's
    #: ``ngram`` configuration, the drafts drawn by the machine); 0: no speculative decoding.
    spec_tokens: int = 0
    #: With ``"cpu-offload"``: the CPU pool's blocks, and whether blocks are stored only when
    #: the GPU pool runs low (``lazy_offload``) rather than as soon as they are full.
    cpu_blocks: int = 8
    lazy_offload: bool = False

    @property
    def mock_connector(self) -> bool:
        """Whether the connector is vLLM's test mock (through the recording connector)."""
        return self.connector in MOCK_CONNECTORS

    @property
    def offloading(self) -> bool:
        """Whether the connector is vLLM's CPU offloading connector."""
        return self.connector == "cpu-offload"


CONFIGS: dict[str, Config] = {
    config.name: config
    for config in (
        Config("full-caching", prefix_caching=True),
        Config("full-no-caching", prefix_caching=False),
        # Two groups share one pool: twice the blocks for the same requests.
        Config("hybrid-sliding-window", prefix_caching=True, sliding_window=8, num_blocks=24),
        Config("async", prefix_caching=True, async_scheduling=True),
        Config(
            "hybrid-async",
            prefix_caching=True,
            sliding_window=8,
            async_scheduling=True,
            num_blocks=24,
        ),
        Config("connector-sync", prefix_caching=True, connector="sync"),
        Config("connector-async", prefix_caching=True, connector="async"),
        Config(
            "connector-async-fail",
            prefix_caching=True,
            connector="async",
            load_failure_policy="fail",
        ),
        # Fewer GPU blocks than the others, more on the CPU: prefixes evicted from the GPU
        # pool while the CPU pool still caches them are loaded back.
        Config(
            "cpu-offload",
            prefix_caching=True,
            connector="cpu-offload",
            num_blocks=10,
            cpu_blocks=16,
        ),
        Config(
            "cpu-offload-lazy",
            prefix_caching=True,
            connector="cpu-offload",
            lazy_offload=True,
            num_blocks=10,
            cpu_blocks=16,
        ),
        # Drafts take slots ahead of the tokens (lookahead blocks), and rejected ones are
        # given back: the pool sees allocations the accepted tokens never fill.
        Config("spec-decode", prefix_caching=True, spec_tokens=3),
        Config(
            "hybrid-spec-decode",
            prefix_caching=True,
            sliding_window=8,
            spec_tokens=2,
            num_blocks=24,
        ),
    )
}


def prompt_tokens(prefix: int, shared_blocks: int, own: int, serial: int) -> list[int]:
    """A prompt: ``shared_blocks`` full blocks of shared prefix ``prefix``, then ``own`` tokens.

    The shared part is the same for every request of ``prefix``, so their full blocks
    hash alike and hit the prefix cache; the own part is drawn from ``serial`` (the
    request's number), so it is the request's alone. An empty prompt gets one token:
    vLLM refuses an empty one.
    """
    shared = [1000 + 100 * prefix + index for index in range(shared_blocks * BLOCK_SIZE)]
    mine = [20_000 + 50 * serial + index for index in range(own)]
    return (shared + mine) or [20_000 + 50 * serial]


def holder_problems(
    blocks: Sequence[Any],
    null_block: Any,
    holders: Iterable[tuple[str, Sequence[Any]]],
    transfers: Iterable[tuple[str, Sequence[Any]]] = (),
) -> list[str]:
    """What breaks the reference-count oracle: each block's count against who holds it.

    ``holders`` names each list of blocks held: a request's block table in one
    group, or a free the scheduler deferred. ``transfers`` names the lists a
    connector holds for a copy in flight, beside whoever else holds them (an
    offloading load's or store's blocks, a cache hit pinned until it is loaded). A
    block's ``ref_cnt`` must be the number of times all these lists hold it; a
    block two ``holders`` hold must be a cached full block (it has a
    ``block_hash``), the only kind requests share. The null block is excepted: its
    count is not kept. Returns one line per problem.
    """
    counts: Counter[int] = Counter()
    owners: dict[int, set[str]] = {}
    for owner, held in holders:
        for block in held:
            if block is null_block or block.is_null:
                continue
            counts[block.block_id] += 1
            owners.setdefault(block.block_id, set()).add(owner)
    for _, held in transfers:
        for block in held:
            if block is not null_block and not block.is_null:
                counts[block.block_id] += 1
    problems = []
    for block in blocks:
        if block is null_block:
            continue
        times = counts.get(block.block_id, 0)
        if block.ref_cnt != times:
            problems.append(f"block {block.block_id}: ref_cnt {block.ref_cnt}, held {times} times")
        sharing = sorted(owners.get(block.block_id, ()))
        if len(sharing) > 1 and block.block_hash is None:
            problems.append(
                f"block {block.block_id}: held by {', '.join(sharing)}, not a cached full block"
            )
    return problems


def transfer_problems(
    blocks: Sequence[Any],
    loads: dict[str, tuple[int, int, bool, tuple[Any, ...]]],
    sends: dict[str, tuple[int, ...]],
) -> list[str]:
    """What breaks the rule of transfers in flight: a block a transfer still uses is held.

    ``loads`` is the connector's record of the loads it took (request id -> first
    token, tokens, asynchronous, the blocks written), ``sends`` of the sends (request
    id -> the ids of the blocks read). Until an asynchronous load or a send is
    reported ended, its blocks must stay held (``ref_cnt`` above 0), even when its
    request was aborted or has finished: a block freed under a transfer is reused
    while the transfer still writes into it or reads it. Returns one line per problem.
    """
    problems = [
        f"block {block.block_id}: free (ref_cnt {block.ref_cnt}) while request "
        f"{request_id}'s load still writes into it"
        for request_id, (_, _, is_async, written) in loads.items()
        if is_async
        for block in written
        if block.ref_cnt <= 0
    ]
    problems += [
        f"block {block_id}: free (ref_cnt {blocks[block_id].ref_cnt}) while request "
        f"{request_id}'s send still reads it"
        for request_id, read in sends.items()
        for block_id in read
        if blocks[block_id].ref_cnt <= 0
    ]
    return problems


def offload_problems(
    gpu_blocks: Sequence[Any],
    cpu_blocks: Sequence[Any],
    copies: Iterable[tuple[str, Sequence[int], Sequence[int]]],
) -> list[str]:
    """What breaks the rule of offloading copies in flight: every block a copy uses is held.

    ``copies`` names each load and store the offloading connector's workers were
    handed (in its metadata) and have not reported ended, with the ids of the GPU
    blocks and of the CPU blocks it copies between. Until it is reported ended,
    each of those blocks must stay held (``ref_cnt`` above 0) in its pool, whatever
    became of its request or of the cache: a block freed under a copy is reused
    while the copy still reads it or writes into it. Returns one line per problem.
    """
    problems = []
    for name, gpu_ids, cpu_ids in copies:
        for kind, blocks, ids in (("GPU", gpu_blocks, gpu_ids), ("CPU", cpu_blocks, cpu_ids)):
            problems += [
                f"{kind} block {i}: free (ref_cnt {blocks[i].ref_cnt}) while {name} copies it"
                for i in ids
                if blocks[i].ref_cnt <= 0
            ]
    return problems


def cache_problems(
    blocks: Sequence[Any], entries: Iterable[tuple[Any, int]], extra: dict[int, set[Any]]
) -> list[str]:
    """What makes the prefix cache incoherent with the blocks, read from outside the pool.

    ``entries`` is every ``(hash, block id)`` the cache maps, ``extra`` the further
    hashes each block is cached under. Every entry must name a block that carries
    its hash (as its ``block_hash`` or among its extra hashes), and every block that
    carries a hash must have its entry. Returns one line per problem.
    """
    problems = []
    mapped: set[tuple[Any, int]] = set()
    for key, block_id in entries:
        mapped.add((key, block_id))
        if not 0 <= block_id < len(blocks):
            problems.append(f"cache entry {key!r}: block {block_id} does not exist")
            continue
        block = blocks[block_id]
        if key != block.block_hash and key not in extra.get(block_id, set()):
            problems.append(f"cache entry {key!r}: block {block_id} does not carry that hash")
    for block in blocks:
        keys = [block.block_hash] if block.block_hash is not None else []
        keys += sorted(extra.get(block.block_id, set()), key=repr)
        problems.extend(
            f"block {block.block_id}: its hash {key!r} has no cache entry"
            for key in keys
            if (key, block.block_id) not in mapped
        )
    return problems


@dataclass(slots=True)
class Stats:
    """What runs of one machine class did, summed over its examples."""

    examples: int = 0
    rules: int = 0
    steps: int = 0
    requests: int = 0
    aborts: int = 0
    resets: int = 0
    preemptions: int = 0
    finished: int = 0
    #: Prompt tokens the prefix cache held, as vLLM's scheduler stats count them.
    hits: int = 0
    #: The connector's transfers that ended: loads (done, failed, with bad blocks) and sends.
    transfers: int = 0
    #: Of those, with CPU offloading: the loads of prefix hits back from the CPU pool.
    cpu_loads: int = 0
    #: Draft tokens scheduled for the model to verify, and those it accepted.
    drafts: int = 0
    accepted: int = 0
    #: The example (1-based) whose run failed first, and the rules each failing run ran.
    first_failure: int | None = None
    failing_lengths: list[int] = field(default_factory=list)

    def add(self, other: Stats) -> None:
        """Add ``other``'s counts into this one (its failures are left out)."""
        self.examples += other.examples
        self.rules += other.rules
        self.steps += other.steps
        self.requests += other.requests
        self.aborts += other.aborts
        self.resets += other.resets
        self.preemptions += other.preemptions
        self.finished += other.finished
        self.hits += other.hits
        self.transfers += other.transfers
        self.cpu_loads += other.cpu_loads
        self.drafts += other.drafts
        self.accepted += other.accepted


@dataclass(frozen=True, slots=True)
class Options:
    """What the command line asked for."""

    cache: Path
    configs: tuple[str, ...]
    #: Seconds to share among the configurations (``None``: the quick, derandomized run).
    budget: float | None
    examples: int
    steps: int
    coverage: bool
    planted: bool
    #: ``module:Class``: the connector the connector configurations derive theirs from.
    connector: str | None
    #: Python files run once vLLM is loaded, before any example: a fix or a bug to try.
    patches: tuple[Path, ...]


def _configs(text: str) -> tuple[str, ...]:
    """Parse ``--configs``: comma-separated names of :data:`CONFIGS`."""
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [name for name in names if name not in CONFIGS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected some of {', '.join(CONFIGS)}, comma-separated"
        )
    return names


def _class_path(text: str) -> str:
    """Parse ``--connector``: ``module:Class``."""
    module, colon, name = text.partition(":")
    if not (colon and module and name.isidentifier()):
        raise argparse.ArgumentTypeError(f"{text!r}: expected module:Class")
    return text


def _python_file(text: str) -> Path:
    """Parse ``--patch``: an existing Python file."""
    path = Path(text)
    if path.suffix != ".py" or not path.is_file():
        raise argparse.ArgumentTypeError(f"{text!r}: expected an existing .py file")
    return path


def _positive(text: str) -> float:
    """Parse a positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive number of seconds")
    return value


def parse_arguments(argv: Sequence[str] | None = None) -> Options:
    """Return the options in ``argv`` (the command line when ``None``)."""
    parser = argparse.ArgumentParser(
        prog="python -I tests/vllm/fuzz_scheduler.py",
        description="a stateful fuzzer of vLLM's Scheduler with check mode on",
    )
    length = parser.add_mutually_exclusive_group()
    length.add_argument(
        "--quick",
        action="store_true",
        help="a fixed, derandomized number of examples per configuration (the default)",
    )
    length.add_argument(
        "--budget",
        type=_positive,
        metavar="SECONDS",
        help="random examples for this many seconds, shared among the configurations",
    )
    length.add_argument(
        "--planted",
        action="store_true",
        help="run each planted bug in check mode and on vLLM's own queue; report what each found",
    )
    parser.add_argument(
        "--configs", type=_configs, default=tuple(CONFIGS), help="comma-separated configurations"
    )
    parser.add_argument(
        "--examples",
        type=int,
        default=100,
        help="examples per configuration in a quick run (a budget's runs: per round)",
    )
    parser.add_argument("--steps", type=int, default=50, help="the most rules in one example")
    parser.add_argument(
        "--coverage", action="store_true", help="report the lines of vLLM's core that ran"
    )
    parser.add_argument(
        "--connector",
        type=_class_path,
        metavar="MODULE:CLASS",
        help="your KV connector (its scheduler side), in place of vLLM's MockKVConnector "
        "in the connector configurations",
    )
    parser.add_argument(
        "--patch",
        type=_python_file,
        action="append",
        default=[],
        metavar="FILE.py",
        help="a Python file run once vLLM is loaded, before any example (your fix, "
        "rebinding what it changes in vLLM's modules); may be given more than once",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=DEFAULT_CACHE,
        help="where vLLM's sdist is kept (default: the checkout's .tox/vllm-engine-cache)",
    )
    arguments = parser.parse_args(argv)
    if arguments.examples < 1:
        parser.error("--examples: at least 1")
    if arguments.steps < 1:
        parser.error("--steps: at least 1")
    return Options(
        cache=arguments.cache,
        configs=arguments.configs,
        budget=arguments.budget,
        examples=arguments.examples,
        steps=arguments.steps,
        coverage=arguments.coverage,
        planted=arguments.planted,
        connector=arguments.connector,
        patches=tuple(arguments.patch),
    )


# ---------------------------------------------------------------------------
# vLLM, loaded once per process.


class OracleViolation(AssertionError):
    """The outside oracle or an end check disagrees with vLLM's pool."""


@dataclass(frozen=True, slots=True)
class Vllm:
    """vLLM loaded for the fuzzer, the plugin in check mode; and vLLM's own classes kept."""

    environment: Any
    utils: Any
    request_status: Any
    block_pool_class: Any
    single_type_class: Any
    #: What ``block_pool`` bound before the plugin rebound it: vLLM's own queue (and block).
    shipped_bindings: dict[str, Any]
    kv_cache_utils: Any
    torch: Any
    kv_cache_interface: Any
    scheduler_classes: tuple[Any, Any]
    kv_connector_output: Any
    draft_token_ids: Any
    #: What the CPU offloading connector's workers report of the stores they ended.
    offload_worker_metadata: Any
    #: vLLM's test modules (``tests.v1...``), which its connector factory imports by name.
    test_modules: dict[str, Any]
    #: ``module:Class`` the connector configurations derive from (``None``: vLLM's mock).
    connector: str | None


_LOADED: list[Vllm] = []


def load(cache: Path = DEFAULT_CACHE, connector: str | None = None) -> Vllm:
    """Load vLLM and its test helpers once, then the plugin in check mode, as vLLM's engine does.

    vLLM's own queue class (and block class) are kept first, so that a machine can be
    built on them too (``checked=False``). ``connector`` (``module:Class``) is the
    connector the connector configurations derive theirs from, instead of vLLM's
    ``MockKVConnector``.
    """
    if _LOADED:
        if _LOADED[0].connector != connector:
            raise ValueError(
                f"vLLM is loaded in this process with connector {_LOADED[0].connector!r}; "
                f"{connector!r} needs a process of its own"
            )
        return _LOADED[0]
    import importlib  # noqa: PLC0415 -- vLLM only where it is installed

    from bench.vllm_scheduler import prepare  # noqa: PLC0415 -- the checkout is on the path now

    with _checkout_tests_set_aside():
        environment = prepare(cache)
        utils = sys.modules["tests.v1.core.utils"]
        base = sys.modules["tests.v1.kv_connector.unit.utils"].MockKVConnector
        test_modules = {name: module for name, module in sys.modules.items() if _is_tests(name)}
    if connector is not None:
        module, _, name = connector.partition(":")
        base = getattr(importlib.import_module(module), name)
    _register_connector(base)
    # vLLM logs each refused prefix-cache reset and each preemption, and as an error each
    # request a failed load fails (the connector configurations draw thousands): the
    # fuzzer's findings are exceptions, not log lines.
    logging.getLogger("vllm").setLevel(logging.CRITICAL)
    kv_cache_utils = environment.kv_cache_utils
    block_pool = environment.block_pool
    shipped = {
        "FreeKVCacheBlockQueue": block_pool.FreeKVCacheBlockQueue,
        "KVCacheBlock": block_pool.KVCacheBlock,
    }
    os.environ["VERIFIED_QUEUE_VLLM"] = "checked"
    importlib.import_module("vllm.plugins").load_general_plugins()
    built = block_pool.FreeKVCacheBlockQueue
    if built.__module__ != "verified_queue.vllm.checked":
        raise RuntimeError(f"the plugin did not install check mode: BlockPool builds {built}")
    sched = importlib.import_module("vllm.v1.core.sched.scheduler")
    async_sched = importlib.import_module("vllm.v1.core.sched.async_scheduler")
    loaded = Vllm(
        environment=environment,
        utils=utils,
        request_status=importlib.import_module("vllm.v1.request").RequestStatus,
        block_pool_class=block_pool.BlockPool,
        single_type_class=importlib.import_module(
            "vllm.v1.core.single_type_kv_cache_manager"
        ).SingleTypeKVCacheManager,
        shipped_bindings=shipped,
        kv_cache_utils=kv_cache_utils,
        torch=importlib.import_module("torch"),
        kv_cache_interface=importlib.import_module("vllm.v1.kv_cache_interface"),
        scheduler_classes=(sched.Scheduler, async_sched.AsyncScheduler),
        kv_connector_output=importlib.import_module("vllm.v1.outputs").KVConnectorOutput,
        draft_token_ids=importlib.import_module("vllm.v1.outputs").DraftTokenIds,
        offload_worker_metadata=importlib.import_module(
            "vllm.v1.simple_kv_offload.metadata"
        ).SimpleCPUOffloadWorkerMetadata,
        test_modules=test_modules,
        connector=connector,
    )
    _LOADED.append(loaded)
    return loaded


#: vLLM's CPU offloading connector, by the name its factory knows it by.
OFFLOADING_CONNECTOR = "SimpleCPUOffloadConnector"
#: The name the recording connector is registered under in vLLM's connector factory.
CONNECTOR_NAME = "FuzzRecordingKVConnector"


def _register_connector(base: Any) -> None:
    """Derive the recording connector from ``base``; register it by name.

    ``base`` is vLLM's test ``MockKVConnector``, or the connector ``--connector``
    names. vLLM's factory loads a connector by module and class name, so the class is
    bound in this module, under :data:`CONNECTOR_NAME`, before it is registered.
    """
    if CONNECTOR_NAME in globals():
        return
    import importlib  # noqa: PLC0415 -- vLLM only where it is installed

    class RecordingKVConnector(base):  # type: ignore[misc]  # vLLM's, untyped
        """A connector, its answer capped as a real connector's, its transfers kept.

        vLLM's mock offers the same count of tokens to every request; a real connector
        offers no more than the prompt has beyond what is computed, less the last
        token, which the model must compute to sample. Each load the scheduler takes
        (``update_state_after_alloc`` with external tokens) is kept in :attr:`loads`
        until the machine reports it, as the connector's workers would. A request
        that finishes by itself (:data:`SENT_ON`) has its KV sent on, as a prefill node sends to a
        decode node: its blocks stay held (``request_finished`` delays the free)
        until the machine reports the send ended (:attr:`sends`).
        """

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            #: Request id -> the ids of the blocks its send reads.
            self.sends: dict[str, tuple[int, ...]] = {}
            #: Request id -> the load: its first token, its count of tokens, whether it is
            #: asynchronous, and the blocks it writes into.
            self.loads: dict[str, tuple[int, int, bool, tuple[Any, ...]]] = {}
            #: Request id -> where its last answer started, and whether it was asynchronous.
            self._asked_at: dict[str, tuple[int, bool]] = {}

        def get_num_new_matched_tokens(
            self, request: Any, num_computed_tokens: int
        ) -> tuple[int | None, bool]:
            matched, is_async = super().get_num_new_matched_tokens(request, num_computed_tokens)
            if matched is None:
                return None, False  # deferred: the scheduler asks again at a later step
            matched = max(0, min(matched, request.num_tokens - 1 - num_computed_tokens))
            is_async = bool(is_async) and matched > 0
            self._asked_at[request.request_id] = (num_computed_tokens, is_async)
            return matched, is_async

        def update_state_after_alloc(
            self, request: Any, blocks: Any, num_external_tokens: int
        ) -> None:
            super().update_state_after_alloc(request, blocks, num_external_tokens)
            if num_external_tokens > 0:
                first, is_async = self._asked_at[request.request_id]
                last = first + num_external_tokens - 1
                written = tuple(blocks.blocks[0][first // BLOCK_SIZE : last // BLOCK_SIZE + 1])
                self.loads[request.request_id] = (
                    first,
                    num_external_tokens,
                    is_async,
                    written,
                )

        def request_finished(
            self, request: Any, block_ids: list[int]
        ) -> tuple[bool, dict[str, Any] | None]:
            delay, params = super().request_finished(request, block_ids)
            # As a prefill node's connector does: only a request that ran to its end is
            # sent on; an aborted one, or one failed (its load failed), is not.
            if request.status.name not in SENT_ON or not block_ids:
                return delay, params
            self.sends[request.request_id] = tuple(block_ids)
            return True, params

    globals()[CONNECTOR_NAME] = RecordingKVConnector
    factory = importlib.import_module("vllm.distributed.kv_transfer.kv_connector.factory")
    factory.KVConnectorFactory.register_connector(CONNECTOR_NAME, __name__, CONNECTOR_NAME)


def _is_tests(name: str) -> bool:
    """Whether ``name`` is the package ``tests`` or a module in it."""
    return name == "tests" or name.startswith("tests.")


@contextlib.contextmanager
def _vllm_tests_importable(vllm: Vllm) -> Iterator[None]:
    """vLLM's test modules back in ``sys.modules`` as ``tests.*`` for the block's length.

    vLLM's config names its test connector by module (``tests.v1.kv_connector...``)
    and imports it when a scheduler is built with it; the recording connector is
    imported by its module's name too, this module (under pytest, a ``tests.*`` one).
    """
    this = sys.modules[__name__]
    with _checkout_tests_set_aside():
        sys.modules.update(vllm.test_modules)
        sys.modules[__name__] = this
        yield


@contextlib.contextmanager
def _checkout_tests_set_aside() -> Iterator[None]:
    """Let vLLM's test helpers import as the package ``tests``, which the checkout's tests are too.

    Under pytest this module is ``tests.vllm.fuzz_scheduler``, so the checkout's
    ``tests`` (a namespace package) is imported already, and vLLM's ``tests.v1...``
    would be looked for in it. The checkout's modules are set aside while vLLM's
    load, then put back; vLLM's leave ``sys.modules`` (the functions loaded from
    them keep them alive), so that a later ``tests.*`` import is the checkout's again.
    """
    ours = {name: sys.modules.pop(name) for name in list(sys.modules) if _is_tests(name)}
    try:
        yield
    finally:
        if ours:
            for name in [name for name in sys.modules if _is_tests(name)]:
                del sys.modules[name]
            sys.modules.update(ours)


@contextlib.contextmanager
def bound(owner: Any, names: dict[str, Any]) -> Iterator[None]:
    """Bind each of ``names`` on ``owner`` (a module or a class) for the block, then restore."""
    saved = {name: getattr(owner, name) for name in names}
    try:
        for name, value in names.items():
            setattr(owner, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(owner, name, value)


def _scheduler_class(vllm: Vllm, config: Config) -> Any:
    """The scheduler class for ``config``: vLLM's, or one adding a group or a connector.

    ``create_scheduler`` builds one full-attention group; the hybrid configurations
    append a sliding-window group to the ``KVCacheConfig`` it passes, before vLLM's
    ``Scheduler`` builds its ``KVCacheManager`` from it (one pool for both groups).
    The mock connector configurations name the recording connector in place of
    vLLM's mock; the offloading ones size the CPU pool, and give each group the
    tensor vLLM's offloading tests give it (the connector sizes its blocks from it).
    """
    base = vllm.scheduler_classes[1 if config.async_scheduling else 0]
    window = config.sliding_window
    if window is None and config.connector is None:
        return base
    interface = vllm.kv_cache_interface
    torch = vllm.torch

    def __init__(
        self: Any, *args: Any, vllm_config: Any, kv_cache_config: Any, **kwargs: Any
    ) -> None:
        if window is not None:
            spec = interface.SlidingWindowSpec(
                block_size=BLOCK_SIZE,
                num_kv_heads=1,
                head_size=1,
                dtype=torch.float32,
                sliding_window=window,
            )
            kv_cache_config.kv_cache_groups.append(interface.KVCacheGroupSpec(["window"], spec))
        if config.mock_connector:
            # create_scheduler names vLLM's mock; the recording one derives from it.
            transfer = vllm_config.kv_transfer_config
            transfer.kv_connector = CONNECTOR_NAME
            transfer.kv_load_failure_policy = config.load_failure_policy
        if config.offloading:
            vllm_config.kv_transfer_config.kv_connector_extra_config = {
                "num_cpu_blocks": config.cpu_blocks,
                "lazy_offload": config.lazy_offload,
            }
            blocks = kv_cache_config.num_blocks
            for group in kv_cache_config.kv_cache_groups:
                page = group.kv_cache_spec.page_size_bytes
                kv_cache_config.kv_cache_tensors.append(
                    interface.KVCacheTensor(
                        size=page * blocks,
                        layers=list(group.layer_names),
                        layer_stride=page * blocks,
                        block_stride=page,
                    )
                )
        base.__init__(
            self, *args, vllm_config=vllm_config, kv_cache_config=kv_cache_config, **kwargs
        )

    kind = "Hybrid" if window is not None else "Connected"
    return type(f"{kind}{base.__name__}", (base,), {"__init__": __init__})


def build_scheduler(vllm: Vllm, config: Config, *, checked: bool) -> Any:
    """vLLM's scheduler for ``config``, on the checked queue or on vLLM's own."""
    utils = vllm.utils

    def create() -> Any:
        return utils.create_scheduler(
            enable_prefix_caching=config.prefix_caching,
            num_blocks=config.num_blocks,
            block_size=BLOCK_SIZE,
            max_num_seqs=config.max_num_seqs,
            max_num_batched_tokens=config.max_num_batched_tokens,
            max_model_len=config.max_model_len,
            async_scheduling=config.async_scheduling,
            num_speculative_tokens=config.spec_tokens or None,
            scheduler_cls=_scheduler_class(vllm, config),
            use_kv_connector=(
                None
                if config.connector is None
                else OFFLOADING_CONNECTOR
                if config.offloading
                else utils.mock_kv(
                    matched_tokens=CONNECTOR_TOKENS,
                    is_async=config.connector == "async",
                    # An async connector first answers "not yet" once per request.
                    num_defers_before_matching=int(config.connector == "async"),
                )
            ),
        )

    with contextlib.ExitStack() as stack:
        if config.mock_connector:
            stack.enter_context(_vllm_tests_importable(vllm))
        if not checked:
            stack.enter_context(bound(vllm.environment.block_pool, vllm.shipped_bindings))
        return create()


# ---------------------------------------------------------------------------
# The machine.


def machine_class(
    vllm: Vllm, config: Config, *, checked: bool = True, checks: str = "all", stats: Stats
) -> type[RuleBasedStateMachine]:
    """A state machine over a fresh scheduler of ``config`` per example, counting into ``stats``.

    ``checked``: the pool builds the plugin's check-mode queue (else vLLM's own);
    ``checks``: one of :data:`CHECK_LEVELS`.
    """
    if checks not in CHECK_LEVELS:
        raise ValueError(f"checks={checks!r}: expected one of {CHECK_LEVELS}")
    if checks == "all" and not checked:
        raise ValueError("checks='all' needs the check-mode queue")
    eos = vllm.utils.EOS_TOKEN_ID
    aborted = vllm.request_status.FINISHED_ABORTED
    environment = vllm.environment

    class SchedulerMachine(RuleBasedStateMachine):
        """vLLM's Scheduler under random requests, steps, aborts and resets."""

        def __init__(self) -> None:
            super().__init__()
            stats.examples += 1
            self.example = stats.examples
            self.scheduler = build_scheduler(vllm, config, checked=checked)
            self.pool = self.scheduler.kv_cache_manager.block_pool
            self.serial = 0
            self.last_reset = 0
            self.live: list[str] = []
            self.in_flight: deque[tuple[Any, dict[str, bool]]] = deque()
            self.rule_count = 0
            self.broken = False
            #: What the connector's workers report at the next model output: load by load,
            #: and how many of the oldest sends ended.
            self.reports: list[str] = []
            self.sent = 0
            #: With speculative decoding: the drafts proposed for each sampling request at
            #: each output (by its place in the output), and how many of its scheduled
            #: drafts the model accepts.
            self.drafts: list[int] = []
            self.accepted: list[int] = []
            #: With CPU offloading: the load events (each with its requests) and the store
            #: events the connector's workers run, oldest first, and how many of the oldest
            #: of each end at each model output from now on (its workers end them in order;
            #: one load and no store until an ``offload`` rule says otherwise).
            self.load_events: deque[tuple[int, list[str], list[int], list[int]]] = deque()
            self.store_events: deque[tuple[int, list[int], list[int]]] = deque()
            self.loads_ending = 1
            self.stores_ending = 0

        @contextlib.contextmanager
        def watched(self) -> Iterator[None]:
            """Mark the example broken if the block raises, so that teardown adds no error."""
            try:
                yield
            except BaseException:
                if not self.broken:
                    self.broken = True
                    stats.failing_lengths.append(self.rule_count)
                    if stats.first_failure is None:
                        stats.first_failure = self.example
                raise

        @rule(
            prefix=st.integers(0, PREFIXES - 1),
            shared_blocks=st.integers(0, PREFIX_BLOCKS),
            own=st.integers(0, BLOCK_SIZE + 1),
            max_tokens=st.integers(1, MAX_TOKENS),
            stop=st.sampled_from(("length", "eos", "stop-token")),
        )
        def add_request(
            self, prefix: int, shared_blocks: int, own: int, max_tokens: int, stop: str
        ) -> None:
            """A request whose prompt opens with a shared prefix, and how it may stop."""
            with self.watched():
                self.rule_count += 1
                self.serial += 1
                sampling = environment.sampling_params(
                    ignore_eos=stop != "eos",
                    max_tokens=max_tokens,
                    stop_token_ids=[STOP_TOKEN] if stop == "stop-token" else None,
                )
                sampling.update_from_generation_config({}, eos)
                request_id = f"r{self.serial}"
                self.scheduler.add_request(
                    environment.request_class(
                        request_id=request_id,
                        prompt_token_ids=prompt_tokens(prefix, shared_blocks, own, self.serial),
                        sampling_params=sampling,
                        pooling_params=None,
                        block_hasher=environment.block_hasher,
                    )
                )
                self.live.append(request_id)
                stats.requests += 1

        @rule(
            steps=st.integers(1, 4),
            ends=st.lists(st.sampled_from((SAMPLED_TOKEN, eos, STOP_TOKEN)), max_size=4),
        )
        def step(self, steps: int, ends: list[int]) -> None:
            """Engine steps: schedule, then the model's output back (async: maybe a step later).

            ``ends`` are the tokens the first requests of each step sample (the others
            sample an ordinary token): EOS or the stop token ends the requests that
            stop on it. With async scheduling an empty ``ends`` leaves one step in flight.
            """
            with self.watched():
                self.rule_count += 1
                for _ in range(steps):
                    self.schedule()
                    if config.async_scheduling and len(self.in_flight) < 2 and not ends:
                        continue  # the output of this step comes back at a later step
                    self.update(ends)

        def schedule(self) -> None:
            """``schedule()``; which requests sample a token is known now, from their counts."""
            output = self.scheduler.schedule()
            stats.steps += 1
            if config.offloading:
                issued = output.kv_connector_metadata
                if issued.load_event >= 0:
                    self.load_events.append(
                        (
                            issued.load_event,
                            list(issued.load_event_to_reqs[issued.load_event]),
                            list(issued.load_gpu_blocks),
                            list(issued.load_cpu_blocks),
                        )
                    )
                if issued.store_event >= 0:
                    self.store_events.append(
                        (
                            issued.store_event,
                            list(issued.store_gpu_blocks),
                            list(issued.store_cpu_blocks),
                        )
                    )
            stats.preemptions += len(output.preempted_req_ids or ())
            samples = {}
            for request_id in output.num_scheduled_tokens:
                request = self.scheduler.requests[request_id]
                # The model samples once a request's tokens are all computed; not for a chunk.
                samples[request_id] = request.num_computed_tokens >= request.num_tokens
            self.in_flight.append((output, samples))

        def update(self, ends: Sequence[int]) -> None:
            """The oldest step's model output, faked as vLLM's tests fake it, back to vLLM.

            A request that samples gets its accepted drafts (of those scheduled, as many
            as :attr:`accepted` says at its place), then its own token; with speculative
            decoding each request that sampled is then given its next drafts.
            """
            output, samples = self.in_flight.popleft()
            ids = list(samples)
            scheduled = output.scheduled_spec_decode_tokens
            tokens: list[list[int]] = []
            for index, request_id in enumerate(ids):
                if not samples[request_id]:
                    tokens.append([])
                    continue
                drafted = len(scheduled.get(request_id, ()))
                accepted = min(drafted, self.accepted[index] if index < len(self.accepted) else 0)
                stats.drafts += drafted
                stats.accepted += accepted
                end = ends[index] if index < len(ends) else SAMPLED_TOKEN
                tokens.append([SAMPLED_TOKEN] * accepted + [end])
            result = environment.model_runner_output(
                req_ids=ids, sampled_token_ids=tokens, kv_connector_output=self.transfers()
            )
            outputs = self.scheduler.update_from_output(output, result)
            for engine_output in outputs.values():
                if engine_output.scheduler_stats is not None:
                    stats.hits += engine_output.scheduler_stats.prefix_cache_stats.hits
            if config.spec_tokens:
                sampled = [request_id for request_id in ids if samples[request_id]]
                self.scheduler.update_draft_token_ids(
                    vllm.draft_token_ids(
                        sampled,
                        [
                            [SAMPLED_TOKEN]
                            * (self.drafts[index] if index < len(self.drafts) else 0)
                            for index in range(len(sampled))
                        ],
                    )
                )
            self.forget_finished()

        def transfers(self) -> Any:
            """What the connector's workers report with this model output (``None``: nothing).

            The loads the connector took, in order, meet the outcomes the last
            ``transfer`` rule drew: a synchronous load was done in the step that
            scheduled it, so it is reported now, bad blocks and all; an asynchronous
            one with no outcome left stays in flight.
            """
            connector = self.scheduler.connector
            if connector is None:
                return None
            if config.offloading:
                return self.offload_transfers()
            reports, self.reports = self.reports, []
            sent, self.sent = self.sent, 0
            sending = list(connector.sends)[:sent]
            for request_id in sending:
                del connector.sends[request_id]
            finished: set[str] = set()
            failed: set[str] = set()
            invalid: set[int] = set()
            ended = 0
            for index, (request_id, (_, _, is_async, written)) in enumerate(
                list(connector.loads.items())
            ):
                outcome = reports[index] if index < len(reports) else None
                if outcome is None and is_async:
                    continue  # still loading
                del connector.loads[request_id]
                ended += 1
                if is_async:
                    finished.add(request_id)  # a failed load is reported finished too
                    if outcome == "failed":
                        failed.add(request_id)
                request = self.scheduler.requests.get(request_id)
                if outcome == "invalid" and request is not None and not request.is_finished():
                    invalid.update(block.block_id for block in written)
            stats.transfers += ended + len(sending)
            if not (finished or failed or invalid or sending):
                return None
            return vllm.kv_connector_output(
                finished_sending=set(sending),
                finished_recving=finished,
                failed_recving=failed,
                invalid_block_ids=invalid,
            )

        def offload_transfers(self) -> Any:
            """What the CPU offloading connector's workers report: the loads and stores ended.

            As vLLM's worker reports them: a load event's requests in
            ``finished_recving``, a store event in its worker metadata; the oldest
            first, as many of each as the last ``offload`` rule said (one load, no store,
            before any).
            """
            ending_loads = [
                self.load_events.popleft()
                for _ in range(min(self.loads_ending, len(self.load_events)))
            ]
            ending_stores = [
                self.store_events.popleft()
                for _ in range(min(self.stores_ending, len(self.store_events)))
            ]
            stats.transfers += len(ending_loads) + len(ending_stores)
            stats.cpu_loads += len(ending_loads)
            if not (ending_loads or ending_stores):
                return None
            return vllm.kv_connector_output(
                finished_recving={r for _, requests, _, _ in ending_loads for r in requests},
                kv_connector_worker_meta=(
                    vllm.offload_worker_metadata(
                        completed_store_events={event: 1 for event, _, _ in ending_stores}
                    )
                    if ending_stores
                    else None
                ),
            )

        # Only with a connector: a rule the other machines do not have leaves their
        # draws, and so their derandomized runs, as they were.
        if config.offloading:

            @rule(loads=st.integers(0, 2), stores=st.integers(0, 2))
            def offload(self, loads: int, stores: int) -> None:
                """How many of the oldest loads from CPU, and stores to it, end at each output."""
                with self.watched():
                    self.rule_count += 1
                    self.loads_ending = loads
                    self.stores_ending = stores

        if config.mock_connector:

            @rule(
                outcomes=st.lists(st.sampled_from(TRANSFER_OUTCOMES), max_size=3),
                sent=st.integers(0, 2),
            )
            def transfer(self, outcomes: list[str], sent: int) -> None:
                """How the connector's oldest loads end, and how many sends, at the next output."""
                with self.watched():
                    self.rule_count += 1
                    self.reports = list(outcomes)
                    self.sent = sent

        if config.spec_tokens:

            @rule(
                drafts=st.lists(st.integers(0, config.spec_tokens), max_size=4),
                accepted=st.lists(st.integers(0, config.spec_tokens), max_size=4),
            )
            def speculate(self, drafts: list[int], accepted: list[int]) -> None:
                """How many drafts the drafter proposes from now on, and the model accepts."""
                with self.watched():
                    self.rule_count += 1
                    self.drafts = list(drafts)
                    self.accepted = list(accepted)

        def forget_finished(self) -> None:
            """Drop the requests vLLM has finished from the live list."""
            still = [r for r in self.live if r in self.scheduler.requests]
            stats.finished += len(self.live) - len(still)
            self.live = still

        @precondition(lambda self: bool(self.live))
        @rule(choice=st.integers(0, 1 << 16))
        def abort(self, choice: int) -> None:
            """Abort one live request, as a client that hangs up (``finish_requests``)."""
            with self.watched():
                self.rule_count += 1
                request_id = self.live.pop(choice % len(self.live))
                self.scheduler.finish_requests([request_id], aborted)
                stats.aborts += 1

        def reset(self, connector: bool) -> None:
            """Reset the prefix cache, and the connector's (``reset_connector``) if asked."""
            with self.watched():
                self.rule_count += 1
                self.last_reset = self.serial
                if self.scheduler.reset_prefix_cache(reset_connector=connector):
                    stats.resets += 1

        # Only once no request is left (vLLM refuses while any block is held), and only
        # after a few requests: a reset empties the cache the requests' prefixes would hit.
        can_reset = precondition(lambda self: not self.live and self.serial >= self.last_reset + 4)
        if config.offloading:

            @can_reset
            @rule(connector=st.booleans())
            def reset_prefix_cache(self, connector: bool) -> None:
                """Reset the prefix cache, as an RLHF weight update does; the CPU's too, or not.

                Reset with the CPU's, the stores in flight are abandoned; without it,
                the prefixes the CPU pool caches are loaded back from it.
                """
                self.reset(connector)

        else:

            @can_reset
            @rule()
            def reset_prefix_cache(self) -> None:
                """Reset the prefix cache, as an RLHF weight update does."""
                self.reset(connector=False)

        @invariant()
        def pool_is_sound(self) -> None:
            """Check mode's whole-pool check, then the outside oracle (by the level asked for)."""
            with self.watched():
                if checks == "all":
                    self.pool.free_block_queue.check_block_pool()
                    if config.offloading:
                        self.offloader().cpu_block_pool.free_block_queue.check_block_pool()
                if checks != "none":
                    self.oracle()

        def offloader(self) -> Any:
            """The CPU offloading connector's scheduler side (its ``SimpleCPUOffloadScheduler``)."""
            return self.scheduler.connector.scheduler_manager

        def offload_holders(self) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
            """What the offloading connector holds: in the GPU pool, and in its CPU pool.

            Each load (issued or not, abandoned by a reset or not) holds the GPU blocks
            it writes into and the CPU blocks it reads; each store (in flight, abandoned,
            or queued at a request's finish) the GPU blocks it reads and the CPU blocks
            it writes; a CPU cache hit is pinned from the match until it is allocated.
            """
            offloader = self.offloader()
            gpu, cpu = self.pool.blocks, offloader.cpu_block_pool.blocks
            copies = [
                (f"load for {request_id}", state.transfer_meta)
                for loads in (offloader._reqs_to_load, offloader._abandoned_reqs_to_load)
                for request_id, state in loads.items()
            ]
            copies += [
                (f"store {event}", transfer)
                for stores in (
                    offloader._store_event_to_blocks,
                    offloader._abandoned_store_event_to_blocks,
                )
                for event, transfer in stores.items()
            ]
            copies += [
                (f"store at finish {index}", transfer)
                for index, transfer in enumerate(offloader._pending_finished_stores)
            ]
            on_gpu = [(name, [gpu[i] for i in meta.gpu_block_ids]) for name, meta in copies]
            on_cpu = [(name, [cpu[i] for i in meta.cpu_block_ids]) for name, meta in copies]
            on_cpu += [
                (f"hit pinned for {request_id}", [b for group in groups for b in group])
                for request_id, (groups, _, _) in offloader._pending_cpu_hits.items()
            ]
            return on_gpu, on_cpu

        def holders(self) -> list[tuple[str, Sequence[Any]]]:
            """Every list of blocks held: each group's block tables, and the deferred frees."""
            held: list[tuple[str, Sequence[Any]]] = []
            coordinator = self.scheduler.kv_cache_manager.coordinator
            for manager in coordinator.single_type_managers:
                held += list(manager.req_to_blocks.items())
            deferred = getattr(self.scheduler, "deferred_frees", ())
            held += [(f"deferred free {i}", blocks) for i, (_, blocks) in enumerate(deferred)]
            return held

        def oracle(self) -> None:
            """The reference counts, the sharing rule, the transfers' blocks: from outside."""
            pool = self.pool
            on_gpu, on_cpu = self.offload_holders() if config.offloading else ([], [])
            problems = holder_problems(pool.blocks, pool.null_block, self.holders(), on_gpu)
            if config.offloading:
                cpu = self.offloader().cpu_block_pool
                problems += [
                    f"CPU {problem}"
                    for problem in holder_problems(cpu.blocks, cpu.null_block, (), on_cpu)
                ]
                copies = [
                    (f"load {event}", gpu_ids, cpu_ids)
                    for event, _, gpu_ids, cpu_ids in self.load_events
                ]
                copies += [
                    (f"store {event}", gpu_ids, cpu_ids)
                    for event, gpu_ids, cpu_ids in self.store_events
                ]
                problems += offload_problems(pool.blocks, cpu.blocks, copies)
            if config.mock_connector:
                connector = self.scheduler.connector
                problems += transfer_problems(pool.blocks, connector.loads, connector.sends)
            if problems:
                raise OracleViolation("; ".join(problems[:4]))

        def teardown(self) -> None:
            """Abort all and run the scheduler dry: every block free, the cache coherent."""
            stats.rules += self.rule_count
            if self.broken or checks == "none":
                return
            with self.watched():
                self.finish_everything()
                pools = [("", self.pool)]
                if config.offloading:
                    pools.append(("CPU ", self.offloader().cpu_block_pool))
                for kind, pool in pools:
                    # Check mode first, as after each rule; then what the outside sees.
                    if checks == "all":
                        pool.free_block_queue.check_block_pool()
                    free = pool.get_num_free_blocks()
                    zero = sum(b.ref_cnt == 0 for b in pool.blocks if b is not pool.null_block)
                    if free != pool.num_gpu_blocks - 1 or zero != free:
                        raise OracleViolation(
                            f"at the end: {free} {kind}blocks in the free queue and {zero} with "
                            f"ref_cnt 0, of {pool.num_gpu_blocks - 1}"
                        )
                    problems = cache_problems(
                        pool.blocks, cache_entries(pool), pool.cached_block_hashes_by_block
                    )
                    if problems:
                        raise OracleViolation(
                            f"at the end: {kind}" + f"; {kind}".join(problems[:4])
                        )

        def finish_everything(self) -> None:
            """Abort every request, then step until no request, free or transfer is left."""
            self.scheduler.finish_requests(list(self.scheduler.requests), aborted)
            for _ in range(8):
                # An aborted request's load, and a finished one's send or store, hold
                # blocks until the transfer ends.
                self.end_transfers()
                while self.in_flight:
                    self.update(())
                self.forget_finished()
                if (
                    not self.scheduler.has_unfinished_requests()
                    and not getattr(self.scheduler, "deferred_frees", ())
                    and not self.transfers_left()
                ):
                    return
                self.schedule()

            raise OracleViolation("at the end: the scheduler did not run dry in 8 steps")

        def end_transfers(self) -> None:
            """Have the connector's workers end every transfer at the next model output."""
            connector = self.scheduler.connector
            if config.mock_connector:
                self.reports = ["done"] * len(connector.loads)
                self.sent = len(connector.sends)
            self.loads_ending = len(self.load_events)
            self.stores_ending = len(self.store_events)

        def transfers_left(self) -> bool:
            """Whether the connector holds a transfer, issued or still to issue."""
            connector = self.scheduler.connector
            if config.mock_connector:
                return bool(connector.loads or connector.sends)
            if config.offloading:
                offloader = self.offloader()
                return bool(
                    offloader.has_pending_stores()
                    or offloader._reqs_to_load
                    or offloader._abandoned_reqs_to_load
                )
            return False

    SchedulerMachine.__name__ = SchedulerMachine.__qualname__ = (
        f"Scheduler_{config.name.replace('-', '_')}_{'checked' if checked else 'shipped'}"
    )
    return SchedulerMachine


def cache_entries(pool: Any) -> list[tuple[Any, int]]:
    """Every ``(hash, block id)`` vLLM 0.34.0's prefix cache maps (its ``_cache``, ``_dup_ids``)."""
    cache = pool.cached_block_hash_to_block
    entries = []
    for key, block_id in cache._cache.items():
        shared = cache._dup_ids.get(key)
        entries += [(key, block_id)] if shared is None else [(key, other) for other in shared]
    return entries


def hypothesis_settings(
    examples: int, steps: int, *, derandomize: bool, **overrides: Any
) -> settings:
    """Settings of one run: no database, no deadline (a step of vLLM's is slow on a busy CPU)."""
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        derandomize=derandomize,
        database=None,
        deadline=None,
        print_blob=True,
        # One failure, shrunk: a planted bug often breaks several checks at once, and
        # shrinking each of them apart multiplies the run's time for no new finding.
        report_multiple_bugs=False,
        # No explain phase: it traces every line of vLLM to say which ran only in failing
        # runs, which triples a planted bug's run and tells nothing the clause does not.
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        **overrides,
    )


@dataclass(frozen=True, slots=True)
class Outcome:
    """One run of a machine class: its counts, its failure, what Hypothesis reported."""

    stats: Stats
    error: BaseException | None
    report: str
    seconds: float

    @property
    def shrunk_length(self) -> int | None:
        """The rules of the last failing example: the shrunk one, which Hypothesis replays last."""
        if self.error is None or not self.stats.failing_lengths:
            return None  # no failure, or one outside the rules (Hypothesis's own, or a build)
        return self.stats.failing_lengths[-1]


def run(
    vllm: Vllm,
    config: Config,
    examples: int,
    steps: int,
    *,
    checked: bool = True,
    checks: str = "all",
    derandomize: bool = True,
) -> Outcome:
    """Run the machine of ``config`` for ``examples`` examples; return what it did and found."""
    stats = Stats()
    machine = machine_class(vllm, config, checked=checked, checks=checks, stats=stats)
    lines: list[object] = []
    start = time.perf_counter()
    error: BaseException | None = None
    with with_reporter(lines.append):
        try:
            run_state_machine_as_test(
                machine, settings=hypothesis_settings(examples, steps, derandomize=derandomize)
            )
        except Exception as raised:  # a failing example, shrunk: the finding
            error = raised
    # Hypothesis gives the falsifying rules as notes on the error (older releases, through
    # the reporter): either way they end up in the outcome's report.
    lines += getattr(error, "__notes__", [])
    return Outcome(
        stats, error, "\n".join(str(line) for line in lines), time.perf_counter() - start
    )


# ---------------------------------------------------------------------------
# The planted bugs, each a patch of vLLM's classes for the length of one run.


@dataclass(frozen=True, slots=True)
class Planted:
    """An allocator bug of a class that shipped, and the configuration that can reach it."""

    name: str
    origin: str
    config: str
    patch: Callable[[Vllm], contextlib.AbstractContextManager[None]]


def _requeue(pool: Any, freed: Sequence[Any], evict_first: bool) -> None:
    """Link ``freed`` as vLLM's ``free_blocks`` does: uncached first, cached last (LRU)."""
    first = [b for b in freed if b.block_hash is None or not pool.enable_caching or evict_first]
    last = [
        b for b in freed if not (b.block_hash is None or not pool.enable_caching or evict_first)
    ]
    pool.free_block_queue.prepend_n(first)
    pool.free_block_queue.append_n(last)


def decrement_then_filter(vllm: Vllm) -> contextlib.AbstractContextManager[None]:
    """``free_blocks`` lowers every count, then picks the blocks at 0 in a second pass.

    Correct for a list of distinct blocks; a block listed twice is linked twice, and
    an iterator (vLLM's managers pass ``reversed(...)``) is spent by the first pass,
    so the second finds nothing: the blocks are lost to the pool.
    """

    def free_blocks(self: Any, ordered_blocks: Iterable[Any], evict_first: bool = False) -> None:
        for block in ordered_blocks:
            if not block.is_null:
                block.ref_cnt -= 1
        freed = [b for b in ordered_blocks if not b.is_null and b.ref_cnt == 0]
        _requeue(self, freed, evict_first)

    return bound(vllm.block_pool_class, {"free_blocks": free_blocks})


def listed_twice(vllm: Vllm) -> contextlib.AbstractContextManager[None]:
    """A request's last block listed twice in the blocks handed to one free."""
    original = vllm.single_type_class.pop_blocks_for_free

    def pop_blocks_for_free(self: Any, request_id: str) -> list[Any]:
        blocks: list[Any] = list(original(self, request_id))
        return [*blocks, blocks[-1]] if len(blocks) > 1 else blocks

    return bound(vllm.single_type_class, {"pop_blocks_for_free": pop_blocks_for_free})


def touch_skips_remove(vllm: Vllm) -> contextlib.AbstractContextManager[None]:
    """A prefix-cache hit counts a free cached block as held but leaves it in the free queue."""

    def touch(_pool: Any, blocks: Sequence[Any]) -> None:
        for block in blocks:
            if not block.is_null:
                block.ref_cnt += 1

    return bound(vllm.block_pool_class, {"touch": touch})


def eviction_keeps_entry(vllm: Vllm) -> contextlib.AbstractContextManager[None]:
    """An eviction resets the block's hash but leaves its prefix-cache entry behind."""

    def evict(self: Any, block: Any) -> bool:
        if block.block_hash is None:
            return False
        self.cached_block_hashes_by_block.pop(block.block_id, None)
        block.reset_hash()
        return True

    return bound(vllm.block_pool_class, {"_maybe_evict_cached_block": evict})


@contextlib.contextmanager
def null_block_freed(vllm: Vllm) -> Iterator[None]:
    """The free path without its null-block handling: the null block linked as free.

    A request's table goes to the free whole, its null head included (no
    ``trim_null_head``), and ``free_blocks`` has no null skip; its count is clamped at
    0, a defensive habit, so the null block, whose count is never kept, comes out at
    0 and is linked like any freed block.
    """
    original = vllm.single_type_class.pop_blocks_for_free

    def pop_blocks_for_free(self: Any, request_id: str) -> list[Any]:
        table = list(self.req_to_blocks.get(request_id, ()))
        original(self, request_id)  # its bookkeeping, but not its trimmed list
        return table

    def free_blocks(self: Any, ordered_blocks: Iterable[Any], evict_first: bool = False) -> None:
        freed = []
        for block in ordered_blocks:
            block.ref_cnt = max(0, block.ref_cnt - 1)
            if block.ref_cnt == 0:
                freed.append(block)
        _requeue(self, freed, evict_first)

    with (
        bound(vllm.single_type_class, {"pop_blocks_for_free": pop_blocks_for_free}),
        bound(vllm.block_pool_class, {"free_blocks": free_blocks}),
    ):
        yield


def abort_frees_loading_blocks(vllm: Vllm) -> contextlib.AbstractContextManager[None]:
    """An aborted request's blocks are freed at once, though its load still writes into them.

    vLLM holds the blocks of a request aborted in ``WAITING_FOR_REMOTE_KVS`` until
    its connector reports the load ended; without that delay the blocks go back to
    the pool, and the next request that takes one gets KV the load overwrites.
    """
    original = vllm.scheduler_classes[0]._free_request

    def _free_request(
        self: Any,
        request: Any,
        delay_free_blocks: bool = False,  # noqa: ARG001 -- asked for, and dropped: the bug
    ) -> Any:
        return original(self, request, delay_free_blocks=False)

    return bound(vllm.scheduler_classes[0], {"_free_request": _free_request})


def send_frees_at_finish(vllm: Vllm) -> contextlib.AbstractContextManager[None]:
    """A finished request's blocks are freed at once, though its KV is still being sent.

    The scheduler drops the connector's "delay the free" answer: the blocks go back
    to the pool while the send still reads them, and a request that takes one
    overwrites KV the decode node has not received yet.
    """
    original = vllm.scheduler_classes[0]._connector_finished

    def _connector_finished(self: Any, request: Any) -> tuple[bool, Any]:
        _, params = original(self, request)
        return False, params

    return bound(vllm.scheduler_classes[0], {"_connector_finished": _connector_finished})


def _offloader_class() -> Any:
    """vLLM's ``SimpleCPUOffloadScheduler`` (the CPU offloading connector's scheduler side)."""
    import importlib  # noqa: PLC0415 -- vLLM only where it is installed

    return importlib.import_module("vllm.v1.simple_kv_offload.manager").SimpleCPUOffloadScheduler


def reset_releases_stores(vllm: Vllm) -> contextlib.AbstractContextManager[None]:  # noqa: ARG001
    """A cache reset gives back the blocks of the stores in flight, though their copies go on.

    vLLM's offloader keeps a store's blocks pinned past a reset ("abandoned") until
    the worker reports the copy ended; released at once, a GPU block the copy still
    reads is handed to a new request, and a CPU block it still writes into is cached.
    """
    offloader = _offloader_class()
    original = offloader.reset

    def reset(self: Any) -> bool:
        for transfer in self._store_event_to_blocks.values():
            self._release_transfer_refs(transfer)
        self._store_event_to_blocks.clear()
        return bool(original(self))

    return bound(offloader, {"reset": reset})


def store_end_frees_twice(vllm: Vllm) -> contextlib.AbstractContextManager[None]:  # noqa: ARG001
    """A store's end gives its GPU blocks back twice.

    The end of a store caches the copy on the CPU and frees the GPU blocks it read,
    and the caller releases the transfer's GPU blocks once more, as the end of an
    abandoned store does (the double free of vLLM #42571, in the offloader): a block
    only the store held is queued free with its count below 0.
    """
    offloader = _offloader_class()
    original = offloader._process_store_completion

    def _process_store_completion(
        self: Any, gpu_block_ids: list[int], cpu_block_ids: list[int], block_meta: Any = None
    ) -> None:
        original(self, gpu_block_ids, cpu_block_ids, block_meta)
        gpu = self._gpu_block_pool
        gpu.free_blocks(gpu.blocks[block_id] for block_id in gpu_block_ids)

    return bound(offloader, {"_process_store_completion": _process_store_completion})


PLANTED: dict[str, Planted] = {
    planted.name: planted
    for planted in (
        Planted(
            "decrement-then-filter",
            "NVIDIA Dynamo PR #13398: count down all, then filter",
            "full-caching",
            decrement_then_filter,
        ),
        Planted(
            "listed-twice",
            "vLLM #42571: a duplicate block in one free",
            "full-caching",
            listed_twice,
        ),
        Planted(
            "touch-skips-remove",
            "a prefix hit on a free block that stays in the free queue",
            "full-caching",
            touch_skips_remove,
        ),
        Planted(
            "eviction-keeps-entry",
            "an eviction that resets the hash and keeps the cache entry",
            "full-caching",
            eviction_keeps_entry,
        ),
        Planted(
            "null-block-freed",
            "a free of the null block",
            "hybrid-sliding-window",
            null_block_freed,
        ),
        Planted(
            "abort-frees-loading-blocks",
            "vLLM #37076: blocks reused while a load still writes into them",
            "connector-async",
            abort_frees_loading_blocks,
        ),
        Planted(
            "send-frees-at-finish",
            "blocks freed while a send to the decode node still reads them",
            "connector-sync",
            send_frees_at_finish,
        ),
        Planted(
            "reset-releases-stores",
            "CPU offloading: a reset frees blocks a store's copy still uses",
            "cpu-offload",
            reset_releases_stores,
        ),
        Planted(
            "store-end-frees-twice",
            "CPU offloading: a store's GPU blocks freed twice at its end",
            "cpu-offload",
            store_end_frees_twice,
        ),
    )
}


def run_planted(
    vllm: Vllm,
    planted: Planted,
    examples: int,
    steps: int,
    *,
    checked: bool = True,
    checks: str = "all",
) -> Outcome:
    """Run ``planted``'s configuration with the bug patched in, derandomized."""
    with planted.patch(vllm):
        return run(vllm, CONFIGS[planted.config], examples, steps, checked=checked, checks=checks)


# ---------------------------------------------------------------------------
# The command line.


def _describe_error(error: BaseException | None) -> str:
    """The failure in one line: its type, and its clause for a check-mode violation."""
    if error is None:
        return "nothing found"
    clause = getattr(error, "clause", None)
    kind = type(error).__name__ + (f" {clause}" if clause else "")
    first = (str(error).strip().splitlines() or [""])[0]
    if not first:
        # A bare assert of vLLM's: where it stands says what it checks.
        frames = traceback.extract_tb(error.__traceback__)
        if frames:
            last = frames[-1]
            first = f"at {Path(last.filename).name}:{last.lineno}: {last.line}"
    return f"{kind}: {first[:140]}"


def _print_outcome(label: str, outcome: Outcome) -> None:
    """One line per run: its counts, its time, and what it found."""
    s = outcome.stats
    found = (
        f"found at example {s.first_failure}, shrunk to {outcome.shrunk_length} rules: "
        f"{_describe_error(outcome.error)}"
        if outcome.error is not None
        else "nothing found"
    )
    print(
        f"{label}: {s.examples} examples, {s.rules} rules, {s.steps} scheduler steps, "
        f"{s.requests} requests ({s.finished} finished, {s.aborts} aborted), "
        f"{s.preemptions} preemptions, {s.hits} prefix-cache hit tokens, {s.resets} cache "
        f"resets, {s.transfers} connector transfers ended ({s.cpu_loads} loads from CPU), "
        f"{s.drafts} draft tokens scheduled "
        f"({s.accepted} accepted); {outcome.seconds:.1f} s; {found}"
    )


def _fuzz(vllm: Vllm, options: Options) -> int:
    """The quick run, or random examples until the budget is spent; 1 if anything failed."""
    failures = 0
    totals = {name: Stats() for name in options.configs}
    seconds = dict.fromkeys(options.configs, 0.0)
    if options.budget is None:
        for name in options.configs:
            outcome = run(vllm, CONFIGS[name], options.examples, options.steps)
            _print_outcome(name, outcome)
            totals[name].add(outcome.stats)
            seconds[name] += outcome.seconds
            if outcome.error is not None:
                failures += 1
                print(outcome.report)
                traceback.print_exception(outcome.error, file=sys.stdout)
    else:
        deadline = time.monotonic() + options.budget
        round_number = 0
        while time.monotonic() < deadline:
            round_number += 1
            for name in options.configs:
                if time.monotonic() >= deadline:
                    break
                outcome = run(
                    vllm, CONFIGS[name], options.examples, options.steps, derandomize=False
                )
                totals[name].add(outcome.stats)
                seconds[name] += outcome.seconds
                if outcome.error is not None:
                    failures += 1
                    _print_outcome(f"{name} (round {round_number})", outcome)
                    print(outcome.report)
                    traceback.print_exception(outcome.error, file=sys.stdout)
            print(
                f"round {round_number} done, {deadline - time.monotonic():.0f} s left", flush=True
            )
    print("\nper configuration:")
    for name, total in totals.items():
        print(
            f"  {name}: {total.examples} examples, {total.rules} rules, {total.steps} scheduler "
            f"steps, {total.requests} requests ({total.finished} finished, {total.aborts} "
            f"aborted), {total.preemptions} preemptions, {total.hits} prefix-cache hit tokens, "
            f"{total.resets} cache resets, {total.transfers} connector transfers ended "
            f"({total.cpu_loads} loads from CPU), "
            f"{total.drafts} draft tokens scheduled ({total.accepted} accepted), "
            f"{seconds[name]:.0f} s"
        )
    everything = Stats()
    for total in totals.values():
        everything.add(total)
    print(
        f"all: {everything.examples} examples, {everything.steps} scheduler steps, "
        f"{everything.requests} requests, {sum(seconds.values()):.0f} s; "
        + ("no failure" if not failures else f"{failures} failing runs")
    )
    return 1 if failures else 0


def _planted_report(vllm: Vllm, options: Options) -> int:
    """Each planted bug in check mode, then on vLLM's own queue with fewer checks."""
    missed = 0
    for planted in PLANTED.values():
        print(f"\n{planted.name} ({planted.origin}), configuration {planted.config}:")
        for label, checked, checks in (
            ("check mode + oracle", True, "all"),
            ("vLLM's queue + oracle", False, "outside"),
            ("vLLM's queue, no check", False, "none"),
        ):
            outcome = run_planted(
                vllm, planted, options.examples, options.steps, checked=checked, checks=checks
            )
            _print_outcome(f"  {label}", outcome)
            if checks == "all" and outcome.error is None:
                missed += 1
    return 1 if missed else 0


def _start_coverage() -> Any:
    """coverage.py, started before vLLM is imported, measuring vLLM's files only."""
    import importlib  # noqa: PLC0415 -- coverage.py only for --coverage

    # Not the project's configuration (config_file=False): its source_pkgs names this
    # package, and coverage.py then ignores include, so vLLM's lines would go unmeasured.
    measured = importlib.import_module("coverage").Coverage(
        data_file=None, config_file=False, include=["*/vllm/v1/core/*"]
    )
    measured.start()
    return measured


def _report_coverage(measured: Any) -> None:
    """Print the line coverage of each of :data:`COVERED_FILES`."""
    measured.stop()
    root = Path(sys.modules["vllm"].__file__ or "").parent
    print("\nline coverage of vLLM's files reached by the run:")
    for name in COVERED_FILES:
        path = str(root / name)
        _, statements, _, missing, _ = measured.analysis2(path)
        ran = len(statements) - len(missing)
        share = 100 * ran / len(statements) if statements else 0.0
        print(f"  {name}: {ran} of {len(statements)} lines, {share:.1f}%")


def main(argv: Sequence[str] | None = None) -> int:
    """Run what the options ask; 0 when nothing failed (``--planted``: when each was found)."""
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # a TextIOWrapper
    options = parse_arguments(argv)
    measured = _start_coverage() if options.coverage else None
    start = time.monotonic()
    vllm = load(options.cache, options.connector)
    print(f"vLLM {vllm.environment.version} loaded, the plugin in check mode")
    for patch in options.patches:
        runpy.run_path(str(patch), run_name="__fuzz_patch__")
        print(f"{patch} run")
    status = _planted_report(vllm, options) if options.planted else _fuzz(vllm, options)
    if measured is not None:
        _report_coverage(measured)
    print(f"{time.monotonic() - start:.0f} s wall, {time.process_time():.0f} s CPU")
    return status


if __name__ == "__main__":
    sys.exit(main())
