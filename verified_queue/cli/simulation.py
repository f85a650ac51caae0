"""The demo's simulated serving engine: requests, a block pool, and the caller bugs it plants.

A small continuous-batching engine in the style of vLLM's v1 scheduler
(:class:`Simulation`), driving a :class:`~verified_queue.kvcache.pool.BlockPool` the
way an engine drives its KV cache; :mod:`verified_queue.cli.demo` runs it from the
command line and prints its report. The workload and the faults are described there.
"""

from __future__ import annotations

import random
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, SupportsIndex, TextIO, TypeVar

from verified_queue.block import Block
from verified_queue.checked import CheckedFreeBlockQueue
from verified_queue.cli.progress import Progress
from verified_queue.kvcache.block import KVCacheBlock
from verified_queue.kvcache.errors import BlockPoolError
from verified_queue.kvcache.keys import (
    BlockHash,
    hash_block_tokens,
    hash_request_tokens,
    key_function_by_name,
)
from verified_queue.kvcache.pool import BlockPool, QueueFactory
from verified_queue.queue import FreeBlockQueue
from verified_queue.traced import TracedFreeBlockQueue

__all__ = [
    "FAULTS",
    "INTERRUPTED",
    "MAX_DEMO_BLOCKS",
    "MAX_WAITING",
    "MIN_CAPACITY",
    "QUEUE_WRAPPERS",
    "DemoConfig",
    "DemoReport",
    "Request",
    "Simulation",
    "call_chain",
    "queue_factory",
    "traces",
]


#: The caller bugs ``--inject`` can plant, and what each one does.
FAULTS: Final = {
    "double-free": (
        "a finished request's blocks are freed a second time (an abort path racing the finish path)"
    ),
    "foreign-remove": (
        "a prefix hit's block id is resolved through the block table of another "
        "KV-cache group's pool, so touch() removes a block linked in that pool's queue"
    ),
    "link-corruption": (
        "a hand-written fast path takes a cached block out of the free queue by "
        "relinking its predecessor only, instead of calling remove()"
    ),
}

_T = TypeVar("_T")

# Token ids: shared text and unique text come from disjoint ranges, so that two
# prompts share a block exactly when they share its text.
_SYSTEM_PROMPTS: Final = 6
_DOCUMENTS: Final = 40
_SHARED_TOKEN_SPACE: Final = 1_000_000
_UNIQUE_TOKENS_START: Final = 1_000_000_000
# The fewest token slots a pool needs: a one-token prompt and one output token.
MIN_CAPACITY: Final = 2

#: The largest pool the demo builds. Each block is a Python object of a few hundred bytes,
#: so a mistyped size (a billion) would fill memory before the first request; the demo's
#: point is shown by thousands.
MAX_DEMO_BLOCKS: Final = 10_000_000

#: The exit status of a run stopped by Ctrl-C, as a shell reports for SIGINT (128 + 2).
INTERRUPTED: Final = 130

#: Arrivals wait while this many requests are waiting already: requests arrive faster
#: than they are served, and without the bound a huge --requests would hold a backlog as
#: large in memory. The default workload never comes near it.
MAX_WAITING: Final = 10_000


@dataclass(frozen=True)
class DemoConfig:
    """The knobs of one demo run."""

    requests: int = 2000
    blocks: int = 8192
    block_size: int = 16
    seed: int = 0
    checks: bool = True
    inject: str | None = None
    #: The trace level (with checks on); ``None``: on exactly when a fault is injected.
    trace: bool | None = None
    max_running: int = 256
    arrivals_per_step: int = 4
    key_function: str = "sha256"


@dataclass
class DemoReport:
    """What a demo run did and how it ended; ``status`` is the exit status (0: clean)."""

    config: DemoConfig
    requests_served: int = 0
    steps: int = 0
    prompt_tokens: int = 0
    prompt_tokens_hit: int = 0
    blocks_allocated: int = 0
    blocks_hit: int = 0
    blocks_freed: int = 0
    blocks_freed_lifo: int = 0
    blocks_evicted: int = 0
    preemptions: int = 0
    pool_calls: int = 0
    seconds: float = 0.0
    queue_checks: str = "off"
    pool_audits: int = 0
    fault_planted: str | None = None
    pool_calls_at_fault: int = 0
    stopped_at: list[str] = field(default_factory=list)
    result: str = ""
    status: int = 0

    @property
    def hit_rate(self) -> float:
        """Return the fraction of prompt tokens found in the prefix cache at first admission.

        Runtime complexity: O(1)
        """
        return self.prompt_tokens_hit / self.prompt_tokens if self.prompt_tokens else 0.0


@dataclass(slots=True, eq=False)
class Request:
    """One request's tokens and KV-cache state, as an engine's scheduler keeps them."""

    index: int
    token_ids: list[int]
    num_prompt_tokens: int
    max_output_tokens: int
    blocks: list[KVCacheBlock] = field(default_factory=list)
    hashes: list[BlockHash] = field(default_factory=list)
    num_cached_blocks: int = 0
    preempted: bool = False


class _CountingCheckedQueue(CheckedFreeBlockQueue[KVCacheBlock]):
    """The check-mode queue, counting the operations it checked and the full checks it ran."""

    __slots__ = ("full_checks", "operations_checked")

    full_checks: int
    operations_checked: int

    def __init__(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Build the checked queue with both counters at zero."""
        # Set before the base __init__, whose append_n is counted.
        self.full_checks = 0
        self.operations_checked = 0
        super().__init__(blocks)

    def full_check(self) -> None:
        """Run the full O(n) check, counting it."""
        self.full_checks += 1
        super().full_check()

    def popleft(self) -> KVCacheBlock:
        """Pop the front block, checked, counting the operation."""
        self.operations_checked += 1
        return super().popleft()

    def popleft_n(self, n: SupportsIndex) -> list[KVCacheBlock]:
        """Pop ``n`` blocks from the front, checked, counting the operation."""
        self.operations_checked += 1
        return super().popleft_n(n)

    def remove(self, block: KVCacheBlock) -> None:
        """Remove ``block``, checked, counting the operation."""
        self.operations_checked += 1
        super().remove(block)

    def append(self, block: KVCacheBlock) -> None:
        """Append ``block``, checked, counting the operation."""
        self.operations_checked += 1
        super().append(block)

    def append_n(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Append ``blocks``, checked, counting the operation."""
        self.operations_checked += 1
        super().append_n(blocks)

    def prepend_n(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Prepend ``blocks``, checked, counting the operation."""
        self.operations_checked += 1
        super().prepend_n(blocks)


class _CountingTracedQueue(TracedFreeBlockQueue[KVCacheBlock]):
    """The trace level's queue, counting the full checks it ran; it numbers its operations itself.

    Unlike ``_CountingCheckedQueue`` it wraps no operation: a wrapper in this file
    would be the caller the trace records, instead of the simulation's own line.
    """

    __slots__ = ("full_checks",)

    full_checks: int

    def __init__(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Build the traced queue with the counter at zero."""
        self.full_checks = 0
        super().__init__(blocks)

    def full_check(self) -> None:
        """Run the full O(n) check, counting it."""
        self.full_checks += 1
        super().full_check()

    @property
    def operations_checked(self) -> int:
        """The operations checked (and traced): the queue's own operation count."""
        return self.operations


def queue_factory(checks: bool, trace: bool = False) -> tuple[QueueFactory, Callable[[], str]]:
    """Return the factory of the pools' free queues and a function describing the checks run."""
    if not checks:
        return FreeBlockQueue, lambda: "off"
    queue_class = _CountingTracedQueue if trace else _CountingCheckedQueue
    queues: list[_CountingTracedQueue | _CountingCheckedQueue] = []

    def factory(blocks: list[KVCacheBlock]) -> FreeBlockQueue[KVCacheBlock]:
        queue = queue_class(blocks)
        queues.append(queue)
        return queue

    def describe() -> str:
        operations = sum(queue.operations_checked for queue in queues)
        full = sum(queue.full_checks for queue in queues)
        traced = " and traced" if trace else ""
        return (
            f"{operations:,} queue operations checked in O(1) before and after{traced}, "
            f"{full:,} full O(n) checks"
        )

    return factory, describe


class Simulation:
    """The engine loop: arrivals, admission, decoding, preemption, finishing; faults on demand."""

    def __init__(self, config: DemoConfig, out: TextIO, progress: Progress | None = None) -> None:
        self.config = config
        self.out = out
        #: The progress line on a terminal's stderr, erased before each line printed to ``out``.
        self.progress = progress
        self.rng = random.Random(config.seed)
        self.key_function = key_function_by_name(config.key_function)
        factory, self.describe_checks = queue_factory(config.checks, traces(config))
        self.pool = BlockPool(config.blocks, queue_factory=factory)
        # The pool of a second KV-cache group (say, a hybrid model's sliding-window
        # layers): idle here, it exists so that a foreign block can be mistaken for ours.
        self.other_pool = BlockPool(config.blocks, queue_factory=factory)
        self.report = DemoReport(config)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.next_index = 0
        self.next_unique_token = _UNIQUE_TOKENS_START
        self.armed = False
        capacity = (config.blocks - 1) * config.block_size
        # A request needs at most a quarter of the pool (and two tokens: one of prompt,
        # one of output), so that one always fits once the others are preempted.
        self.max_request_tokens = max(MIN_CAPACITY, capacity // 4)
        rng = self.rng
        self.system_prompts = [
            self._shared_text(index, rng.randint(200, 1500)) for index in range(_SYSTEM_PROMPTS)
        ]
        self.documents = [
            self._shared_text(_SYSTEM_PROMPTS + index, rng.randint(100, 2000))
            for index in range(_DOCUMENTS)
        ]
        # Popular documents are asked about more often (a Zipf-like law).
        self.document_weights = [1.0 / (rank + 1) for rank in range(_DOCUMENTS)]

    @staticmethod
    def _shared_text(number: int, length: int) -> list[int]:
        """Return the ``length`` token ids of shared text ``number``."""
        start = number * _SHARED_TOKEN_SPACE
        return list(range(start, start + length))

    def _unique_text(self, length: int) -> list[int]:
        """Return ``length`` token ids no other text uses."""
        start = self.next_unique_token
        self.next_unique_token += length
        return list(range(start, start + length))

    def _new_request(self) -> Request:
        """Draw a request: a system prompt, maybe a document, its own text, an output length."""
        rng = self.rng
        prompt = list(rng.choice(self.system_prompts))
        if rng.random() < 0.6:
            prompt += rng.choices(self.documents, self.document_weights)[0]
        prompt += self._unique_text(rng.randint(8, 400))
        output = rng.randint(16, 512)
        cap = self.max_request_tokens
        if len(prompt) + output > cap:
            output = max(1, min(output, cap // 4))
            del prompt[cap - output :]
        request = Request(self.next_index, prompt, len(prompt), output)
        self.next_index += 1
        return request

    # --- the engine loop ---------------------------------------------------------------

    def run(self) -> DemoReport:
        """Step the engine until every request is served; a pool or queue error ends it early."""
        config = self.config
        report = self.report
        started = time.perf_counter()
        milestone = 1
        while report.requests_served < config.requests:
            report.steps += 1
            for _ in range(self.rng.randint(0, config.arrivals_per_step)):
                if self.next_index < config.requests and len(self.waiting) < MAX_WAITING:
                    self.waiting.append(self._new_request())
            while self.waiting and len(self.running) < config.max_running:
                if not self._admit(self.waiting[0]):
                    if not self.running:
                        raise BlockPoolError("a waiting request can never fit in the pool")
                    break
                self.running.append(self.waiting.popleft())
            self._decode_step()
            if self.progress is not None:
                self.progress.update(report.requests_served)
            while report.requests_served * 10 >= milestone * config.requests:
                self._progress(milestone * 10, time.perf_counter() - started)
                milestone += 1
            if (
                config.inject
                and report.fault_planted is None
                and report.requests_served * 2 >= config.requests
            ):
                self.armed = True
        report.seconds = time.perf_counter() - started
        return report

    def _admit(self, request: Request) -> bool:
        """Give ``request`` its blocks if they fit: touch its cached prefix, allocate the rest."""
        pool = self.pool
        report = self.report
        size = self.config.block_size
        tokens = request.token_ids
        request.hashes = hash_request_tokens(tokens, size, self.key_function, known=request.hashes)
        # The last prompt token is always recomputed: it produces the first output's logits.
        report.pool_calls += 1
        hit = pool.find_longest_cache_hit(request.hashes[: (len(tokens) - 1) // size])
        needed = -(-len(tokens) // size) - len(hit)
        # Touching a free cached block takes it out of the free queue too.
        evictable = sum(1 for block in hit if block.ref_cnt == 0)
        if needed + evictable > pool.get_num_free_blocks():
            return False
        report.pool_calls += 1
        if self.armed and hit:
            self._touch_with_planted_fault(request, hit)
        else:
            pool.touch(hit)
        # Each call counted as it is made: one that raises is a call, the one after it is not.
        report.pool_calls += 1
        request.blocks = hit + pool.get_new_blocks(needed)
        full = len(tokens) // size
        report.pool_calls += 1
        pool.cache_full_blocks(request.blocks, request.hashes, len(hit), full)
        request.num_cached_blocks = full
        if not request.preempted:
            # A re-admission would count the request's own blocks, cached before it was
            # preempted, as hits: the rate is of first admissions, to measure shared prompts.
            report.prompt_tokens += len(tokens)
            report.prompt_tokens_hit += len(hit) * size
        return True

    def _touch_with_planted_fault(self, request: Request, hit: list[KVCacheBlock]) -> None:
        """Touch ``hit`` through the planted bug, if the bug is one of a prefix hit."""
        fault = self.config.inject
        if fault == "foreign-remove":
            self._plant(fault, request)
            hit[-1] = self.other_pool.blocks[hit[-1].block_id]
            self._faulty_call(self.pool.touch, hit)
            return
        if fault == "link-corruption":
            free = [block for block in hit if block.ref_cnt == 0]
            if free:
                self._plant(fault, request)
                victim = free[0]
                _unlink_forward_only(victim)
                victim.ref_cnt += 1
                self.pool.touch([block for block in hit if block is not victim])
                return
        self.pool.touch(hit)

    def _decode_step(self) -> None:
        """Generate one token for every running request, preempting when the pool runs dry."""
        pool = self.pool
        report = self.report
        size = self.config.block_size
        running = self.running
        position = 0
        while position < len(running):
            request = running[position]
            tokens = request.token_ids
            if len(tokens) == len(request.blocks) * size:
                # The next token starts a new block: preempt the latest admitted until one is free.
                while pool.get_num_free_blocks() == 0 and running[-1] is not request:
                    self._preempt(running.pop())
                if pool.get_num_free_blocks() == 0:
                    self._preempt(running.pop())  # the request itself, the last one running
                    continue
                report.pool_calls += 1
                request.blocks += pool.get_new_blocks(1)
            tokens.append(self.next_unique_token)
            self.next_unique_token += 1
            if len(tokens) % size == 0:
                parent = request.hashes[-1] if request.hashes else None
                request.hashes.append(hash_block_tokens(parent, tokens[-size:], self.key_function))
                full = len(tokens) // size
                report.pool_calls += 1
                pool.cache_full_blocks(
                    request.blocks, request.hashes, request.num_cached_blocks, full
                )
                request.num_cached_blocks = full
            if len(tokens) - request.num_prompt_tokens >= request.max_output_tokens:
                running.pop(position)
                self._finish(request)
            else:
                position += 1

    def _preempt(self, request: Request) -> None:
        """Free a running request's blocks and queue it again first, its tokens kept."""
        self.report.pool_calls += 1
        self.pool.free_blocks(reversed(request.blocks))
        request.blocks = []
        request.num_cached_blocks = 0
        request.preempted = True
        self.waiting.appendleft(request)
        self.report.preemptions += 1

    def _finish(self, request: Request) -> None:
        """Free a finished request's blocks, its chain's tail first."""
        self.report.pool_calls += 1
        self.pool.free_blocks(reversed(request.blocks))
        self.report.requests_served += 1
        if self.armed and self.config.inject == "double-free":
            self._plant("double-free", request)
            self.report.pool_calls += 1
            self._faulty_call(self.pool.free_blocks, reversed(request.blocks))

    def _plant(self, fault: str, request: Request) -> None:
        """Record that ``fault`` is planted now, once per run, and say so."""
        self.armed = False
        self.report.fault_planted = fault
        self.report.pool_calls_at_fault = self.report.pool_calls
        self._clear_progress()
        print(
            f"  [fault] planting {fault} at request {request.index} "
            f"({self.report.requests_served:,} served so far): {FAULTS[fault]}",
            file=self.out,
            flush=True,
        )

    def _faulty_call(self, call: Callable[[_T], None], argument: _T) -> None:
        """Make the planted fault's pool call (its caller counts it); its frame marks the
        faulty call in a traceback."""
        call(argument)

    def _clear_progress(self) -> None:
        """Erase the progress line on stderr, if one shows, before a line of the demo's own."""
        if self.progress is not None:
            self.progress.clear()

    def _progress(self, percent: int, seconds: float) -> None:
        """Print one progress line: requests served, queues, free blocks, hit rate, time."""
        report = self.report
        self._clear_progress()
        print(
            f"  [{percent:3d}%] {report.requests_served:>7,} served, "
            f"{len(self.running):>4} running, {len(self.waiting):>5} waiting, "
            f"{self.pool.get_num_free_blocks():>7,} blocks free, "
            f"hit rate {report.hit_rate:6.1%}, {seconds:6.1f} s",
            file=self.out,
            flush=True,  # progress in a piped log must show as it happens
        )


def _unlink_forward_only(block: Block) -> None:
    """The planted link-corruption bug: a hand-rolled unlink that skips three of its four steps.

    It bridges the predecessor over ``block`` but leaves the successor's back
    link pointing at ``block``, leaves ``block`` linked, and leaves the count.
    """
    before = block.prev_free_block
    if before is not None:
        before.next_free_block = block.next_free_block


QUEUE_WRAPPERS: Final = frozenset(vars(_CountingCheckedQueue))


def traces(config: DemoConfig) -> bool:
    """Whether the run uses the trace level: asked for, or by default when a fault is planted.

    A planted fault is a debugging session, where the trace's "who did it"
    is the point; a clean run shows check mode's own pace, which tracing
    would slow down.
    """
    if not config.checks:
        return False
    return config.inject is not None if config.trace is None else config.trace


def call_chain(error: BaseException) -> tuple[list[str], bool]:
    """Name the calls from the simulation's last line down to where ``error`` was raised.

    Also return whether the chain starts at the planted fault's own call.
    """
    frames = traceback.extract_tb(error.__traceback__)
    ours = [
        index
        for index, frame in enumerate(frames)
        if frame.filename == __file__ and frame.name not in QUEUE_WRAPPERS
    ]
    first = ours[-1] if ours else 0
    at_faulty_call = bool(frames) and frames[first].name == "_faulty_call"
    if at_faulty_call and first > 0:
        first -= 1  # show the line that made the faulty call, too
    chain = [
        f"{Path(frame.filename).name}:{frame.lineno} in {frame.name}: {frame.line}"
        for frame in frames[first:]
        if frame.filename != __file__ or frame.name not in QUEUE_WRAPPERS
    ]
    return chain, at_faulty_call
