"""``python -m verified_queue demo``: a prefix-caching block pool serving a simulated workload.

The simulation is a small continuous-batching engine in the style of vLLM's
v1 scheduler, driving a :class:`~verified_queue.kvcache.pool.BlockPool` the way an
engine drives its KV cache:

* requests arrive a few per step; each prompt is one of 6 system prompts,
  often followed by one of 40 documents (the popular ones asked about more
  often), then the user's own text;
* a request is admitted first come, first served when its blocks fit: the
  longest cached prefix of its prompt is *touched* (taken out of the middle of
  the free queue when no one else holds it) and the rest is allocated;
* every running request decodes one token per step, taking a new block when
  its last one is full; if none is free, the most recently admitted request
  is preempted (its blocks freed, its tokens kept for a later re-admission);
* full blocks are cached as they fill, under SHA-256 keys by default
  (``--key-function builtin`` for Python's ``hash``), and a finished request
  frees its blocks in reverse, so its unique tail is evicted before the shared
  prefix; a freed block with no cached hash (a partial last block) goes to the
  front of the free queue instead, to be reused first (LIFO).

In check mode (the default) the pool's free queue is a
``CheckedFreeBlockQueue``; ``--inject`` plants a realistic caller bug halfway
through the run to show where it is stopped, in the trace level
(``TracedFreeBlockQueue``, ``--no-trace`` to leave it off), so that the report
also names the demo's own line that set the bug up: where a block freed twice
was freed the first time. Every run that raises nothing
ends with an audit of the pool's invariants (``BlockPool.check_consistency``);
then comes the report. Its calls per second time the whole simulation, so
they are a sign of life, not a benchmark: measurements live in ``bench/``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, SupportsIndex, TextIO, TypeVar

from verified_queue.block import Block
from verified_queue.checked import CheckedFreeBlockQueue
from verified_queue.cli import PROG, usage_error
from verified_queue.errors import QueueError
from verified_queue.kvcache.keys import (
    KEY_FUNCTIONS,
    BlockHash,
    hash_block_tokens,
    hash_request_tokens,
    key_function_by_name,
)
from verified_queue.kvcache.pool import BlockPool, BlockPoolError, KVCacheBlock, QueueFactory
from verified_queue.queue import FreeBlockQueue
from verified_queue.traced import TracedFreeBlockQueue

__all__ = [
    "FAULTS",
    "DemoConfig",
    "DemoReport",
    "add_arguments",
    "run",
    "run_demo",
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
_MIN_CAPACITY: Final = 2

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
class _Request:
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


def _queue_factory(checks: bool, trace: bool = False) -> tuple[QueueFactory, Callable[[], str]]:
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


class _Simulation:
    """The engine loop: arrivals, admission, decoding, preemption, finishing; faults on demand."""

    def __init__(self, config: DemoConfig, out: TextIO) -> None:
        self.config = config
        self.out = out
        self.rng = random.Random(config.seed)
        self.key_function = key_function_by_name(config.key_function)
        factory, self.describe_checks = _queue_factory(config.checks, _traces(config))
        self.pool = BlockPool(config.blocks, queue_factory=factory)
        # The pool of a second KV-cache group (say, a hybrid model's sliding-window
        # layers): idle here, it exists so that a foreign block can be mistaken for ours.
        self.other_pool = BlockPool(config.blocks, queue_factory=factory)
        self.report = DemoReport(config)
        self.waiting: deque[_Request] = deque()
        self.running: list[_Request] = []
        self.next_index = 0
        self.next_unique_token = _UNIQUE_TOKENS_START
        self.armed = False
        capacity = (config.blocks - 1) * config.block_size
        # A request needs at most a quarter of the pool (and two tokens: one of prompt,
        # one of output), so that one always fits once the others are preempted.
        self.max_request_tokens = max(_MIN_CAPACITY, capacity // 4)
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

    def _new_request(self) -> _Request:
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
        request = _Request(self.next_index, prompt, len(prompt), output)
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
            while report.requests_served * 10 >= milestone * config.requests and milestone <= 10:
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

    def _admit(self, request: _Request) -> bool:
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
        report.pool_calls += 2
        request.blocks = hit + pool.get_new_blocks(needed)
        full = len(tokens) // size
        pool.cache_full_blocks(request.blocks, request.hashes, len(hit), full)
        request.num_cached_blocks = full
        if not request.preempted:
            # A re-admission would count the request's own blocks, cached before it was
            # preempted, as hits: the rate is of first admissions, to measure shared prompts.
            report.prompt_tokens += len(tokens)
            report.prompt_tokens_hit += len(hit) * size
        return True

    def _touch_with_planted_fault(self, request: _Request, hit: list[KVCacheBlock]) -> None:
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

    def _preempt(self, request: _Request) -> None:
        """Free a running request's blocks and queue it again first, its tokens kept."""
        self.report.pool_calls += 1
        self.pool.free_blocks(reversed(request.blocks))
        request.blocks = []
        request.num_cached_blocks = 0
        request.preempted = True
        self.waiting.appendleft(request)
        self.report.preemptions += 1

    def _finish(self, request: _Request) -> None:
        """Free a finished request's blocks, its chain's tail first."""
        self.report.pool_calls += 1
        self.pool.free_blocks(reversed(request.blocks))
        self.report.requests_served += 1
        if self.armed and self.config.inject == "double-free":
            self._plant("double-free", request)
            self._faulty_call(self.pool.free_blocks, reversed(request.blocks))

    def _plant(self, fault: str, request: _Request) -> None:
        """Record that ``fault`` is planted now, once per run, and say so."""
        self.armed = False
        self.report.fault_planted = fault
        self.report.pool_calls_at_fault = self.report.pool_calls
        print(
            f"  [fault] planting {fault} at request {request.index}: {FAULTS[fault]}", file=self.out
        )

    def _faulty_call(self, call: Callable[[_T], None], argument: _T) -> None:
        """Make the planted fault's pool call; its frame marks the faulty call in a traceback."""
        self.report.pool_calls += 1
        call(argument)

    def _progress(self, percent: int, seconds: float) -> None:
        """Print one progress line: requests served, queues, free blocks, hit rate, time."""
        report = self.report
        print(
            f"  [{percent:3d}%] {report.requests_served:>7,} served, "
            f"{len(self.running):>4} running, {len(self.waiting):>5} waiting, "
            f"{self.pool.get_num_free_blocks():>7,} blocks free, "
            f"hit rate {report.hit_rate:6.1%}, {seconds:6.1f} s",
            file=self.out,
        )


def _unlink_forward_only(block: Block) -> None:
    """The planted link-corruption bug: a hand-rolled unlink that skips three of its four steps.

    It bridges the predecessor over ``block`` but leaves the successor's back
    link pointing at ``block``, leaves ``block`` linked, and leaves the count.
    """
    before = block.prev_free_block
    if before is not None:
        before.next_free_block = block.next_free_block


_QUEUE_WRAPPERS: Final = frozenset(vars(_CountingCheckedQueue))


def _call_chain(error: BaseException) -> tuple[list[str], bool]:
    """Name the calls from the simulation's last line down to where ``error`` was raised.

    Also return whether the chain starts at the planted fault's own call.
    """
    frames = traceback.extract_tb(error.__traceback__)
    ours = [
        index
        for index, frame in enumerate(frames)
        if frame.filename == __file__ and frame.name not in _QUEUE_WRAPPERS
    ]
    first = ours[-1] if ours else 0
    at_faulty_call = bool(frames) and frames[first].name == "_faulty_call"
    if at_faulty_call and first > 0:
        first -= 1  # show the line that made the faulty call, too
    chain = [
        f"{Path(frame.filename).name}:{frame.lineno} in {frame.name}: {frame.line}"
        for index, frame in enumerate(frames[first:], start=first)
        if frame.filename != __file__ or frame.name not in _QUEUE_WRAPPERS
    ]
    return chain, at_faulty_call


def _traces(config: DemoConfig) -> bool:
    """Whether the run uses the trace level: asked for, or by default when a fault is planted.

    A planted fault is a debugging session, where the trace's "who did it"
    is the point; a clean run shows check mode's own pace, which tracing
    would slow down.
    """
    if not config.checks:
        return False
    return config.inject is not None if config.trace is None else config.trace


def _validate(config: DemoConfig) -> None:
    """Raise ``ValueError`` for a configuration the simulation cannot serve."""
    if config.inject is not None and config.inject not in FAULTS:
        raise ValueError(f"unknown fault {config.inject!r}; expected one of {sorted(FAULTS)}")
    key_function_by_name(config.key_function)  # a ValueError naming the choices
    if config.requests < 1:
        raise ValueError(f"--requests {config.requests}: at least one request is needed")
    if config.block_size < 1:
        raise ValueError(f"--block-size {config.block_size}: a block holds at least one token")
    if config.blocks > MAX_DEMO_BLOCKS:
        raise ValueError(
            f"--blocks {config.blocks}: the demo builds at most {MAX_DEMO_BLOCKS:,} blocks "
            "(each is a Python object; a pool this large would fill memory first)"
        )
    if config.blocks < 2 or (config.blocks - 1) * config.block_size < _MIN_CAPACITY:
        raise ValueError(
            f"--blocks {config.blocks} of {config.block_size} tokens: too small for any "
            f"request (block 0 is the null block, and a request needs {_MIN_CAPACITY} tokens)"
        )


def run_demo(config: DemoConfig, out: TextIO | None = None) -> DemoReport:
    """Run the simulated serving workload of ``config``; print progress and a report to ``out``.

    Returns the report; its ``status`` is 0 for a clean run and 1 when a
    fault was stopped, the pool was found damaged, or a fault could not be
    planted.

    Runtime complexity: O(tokens generated + blocks allocated), plus the checks

    >>> import io
    >>> report = run_demo(DemoConfig(requests=20, blocks=256, checks=False), io.StringIO())
    >>> report.requests_served, report.status
    (20, 0)
    """
    _validate(config)
    if out is None:
        out = sys.stdout  # looked up now, not at import, so that redirection works
    mode = "check mode on" if config.checks else "check mode off (--no-checks)"
    if _traces(config):
        mode += ", trace level"
    print(
        f"simulating {config.requests:,} requests on a pool of {config.blocks:,} blocks "
        f"x {config.block_size} tokens, seed {config.seed}, {config.key_function} keys, {mode}",
        file=out,
    )
    simulation = _Simulation(config, out)
    report = simulation.report
    started = time.perf_counter()
    try:
        simulation.run()
    except KeyboardInterrupt:
        report.result = (
            f"INTERRUPTED (Ctrl-C) after {report.requests_served:,} of "
            f"{config.requests:,} requests; the audit below did not run"
        )
        report.status = INTERRUPTED
    except QueueError as error:
        report.result = _stopped(report, error, "STOPPED")
    except Exception as error:
        if report.fault_planted is None:
            raise  # no fault was planted: this is a real bug, and its traceback matters
        report.result = _stopped(report, error, "CRASHED")
    report.seconds = time.perf_counter() - started
    pool = simulation.pool
    report.blocks_allocated = pool.num_allocated
    report.blocks_freed = pool.num_freed
    report.blocks_freed_lifo = pool.num_freed_lifo
    report.blocks_evicted = pool.num_evicted
    report.blocks_hit = pool.num_touched
    report.queue_checks = simulation.describe_checks()
    if report.status == INTERRUPTED:
        pass
    elif report.result:
        report.status = 1
    else:
        report.result, report.status = _audit(simulation)
    _print_report(report, out)
    return report


def _stopped(report: DemoReport, error: BaseException, verb: str) -> str:
    """Describe a run that ``error`` ended: where, and how far from the planted fault."""
    chain, at_faulty_call = _call_chain(error)
    report.stopped_at = chain
    cause = f"{type(error).__name__}: {error}"
    if report.fault_planted is None:
        return f"{verb} with no fault planted, by {cause}"
    if at_faulty_call:
        return f"{verb} at the faulty call, by {cause}"
    later = report.pool_calls - report.pool_calls_at_fault
    if later == 0:
        return f"{verb} within the pool call that planted the {report.fault_planted}, by {cause}"
    return f"{verb} {later:,} pool calls after the {report.fault_planted} was planted, by {cause}"


def _audit(simulation: _Simulation) -> tuple[str, int]:
    """Check both pools' invariants, and that nothing is held, after a run that raised nothing.

    Returns the result line and the exit status.
    """
    report = simulation.report
    report.pool_audits += 1
    try:
        simulation.pool.check_consistency()
        simulation.other_pool.check_consistency()
    except BlockPoolError as error:
        return f"DAMAGED: the end-of-run audit found: {error}", 1
    held = simulation.config.blocks - 1 - simulation.pool.get_num_free_blocks()
    if held:
        return f"DAMAGED: {held:,} blocks are still held after every request finished (a leak)", 1
    if report.fault_planted is not None:
        return f"UNDETECTED: the {report.fault_planted} fault went unnoticed", 1
    if simulation.config.inject is not None:
        return f"NOT PLANTED: the {simulation.config.inject} fault found no chance", 1
    if not simulation.config.checks:
        return "OK: every request served, the end-of-run audit passed (check mode was off)", 0
    return "OK: every request served, every check passed", 0


def _print_report(report: DemoReport, out: TextIO) -> None:
    config = report.config
    rate = report.pool_calls / report.seconds if report.seconds else 0.0
    rows = [
        ("requests served", f"{report.requests_served:,} of {config.requests:,}"),
        (
            "prefix-cache hit rate",
            f"{report.hit_rate:.1%} of prompt tokens at first admission "
            f"({report.prompt_tokens_hit:,} of {report.prompt_tokens:,})",
        ),
        ("blocks allocated", f"{report.blocks_allocated:,}"),
        ("blocks hit", f"{report.blocks_hit:,} (cached blocks touched at admission)"),
        ("blocks freed", f"{report.blocks_freed:,} (returned to the free queue)"),
        (
            "reused LIFO",
            f"{report.blocks_freed_lifo:,} of the blocks freed had no cached hash, "
            "so went to the front (reused first)",
        ),
        ("blocks evicted", f"{report.blocks_evicted:,} (cached blocks reused for new tokens)"),
        ("preemptions", f"{report.preemptions:,}"),
        (
            "pool calls",
            f"{report.pool_calls:,} in {report.seconds:.2f} s ({rate:,.0f}/s, simulation included)",
        ),
        ("invariant checks", f"{report.queue_checks}; {report.pool_audits} pool audit"),
    ]
    if report.fault_planted is not None:
        rows.append(("fault planted", f"{report.fault_planted}: {FAULTS[report.fault_planted]}"))
    rows.extend(("raised from", frame) for frame in report.stopped_at)
    rows.append(("result", report.result))
    print("report", file=out)
    for label, value in rows:
        # A trace-level error's history lines continue under the value column.
        lines = value.replace("\n", "\n" + " " * 25)
        print(f"  {label:<22} {lines}", file=out)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the demo's options to its subcommand parser.

    Runtime complexity: O(1)
    """
    defaults = DemoConfig()
    parser.add_argument("--requests", type=int, default=defaults.requests, help="requests to serve")
    parser.add_argument(
        "--blocks", type=int, default=defaults.blocks, help="KV-cache blocks in the pool"
    )
    parser.add_argument(
        "--block-size", type=int, default=defaults.block_size, help="tokens per block"
    )
    parser.add_argument("--seed", type=int, default=defaults.seed, help="random seed")
    parser.add_argument(
        "--no-checks",
        dest="checks",
        action="store_false",
        help="run on the production queue, without check mode (faster)",
    )
    parser.add_argument(
        "--trace",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the trace level of check mode: every error names where its blocks were last "
        "linked and unlinked (default: on with --inject, off otherwise)",
    )
    parser.add_argument(
        "--key-function",
        choices=sorted(KEY_FUNCTIONS),
        default=defaults.key_function,
        help="prefix-cache key function: sha256 (the default; collision resistant) or builtin "
        "(Python's hash: faster, for one trusted tenant only)",
    )
    parser.add_argument(
        "--inject",
        choices=sorted(FAULTS),
        help="plant a caller bug halfway through the run: "
        + "; ".join(f"{name}: {what}" for name, what in FAULTS.items()),
    )


def run(args: argparse.Namespace) -> int:
    """Run the demo from parsed arguments; return 0 (clean), 1 (fault or damage), 2 (usage), 130.

    130: stopped by Ctrl-C, after printing the report of the requests served so far.

    Runtime complexity: that of :func:`run_demo`
    """
    config = DemoConfig(
        requests=args.requests,
        blocks=args.blocks,
        block_size=args.block_size,
        seed=args.seed,
        checks=args.checks,
        inject=args.inject,
        trace=args.trace,
        key_function=args.key_function,
    )
    try:
        _validate(config)
    except ValueError as error:
        return usage_error(f"{PROG} demo", str(error))
    return run_demo(config).status
