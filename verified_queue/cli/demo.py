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
import sys
import time
from typing import TextIO

from verified_queue.cli import PROG, usage_error
from verified_queue.cli.progress import Progress
from verified_queue.cli.simulation import (
    FAULTS,
    INTERRUPTED,
    MAX_DEMO_BLOCKS,
    MIN_CAPACITY,
    DemoConfig,
    DemoReport,
    Simulation,
    call_chain,
    traces,
)
from verified_queue.errors import QueueError
from verified_queue.kvcache.errors import BlockPoolError
from verified_queue.kvcache.keys import (
    KEY_FUNCTIONS,
    key_function_by_name,
)

__all__ = [
    "FAULTS",
    "DemoConfig",
    "DemoReport",
    "add_arguments",
    "run",
    "run_demo",
    "validate",
]


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
    if config.blocks < 2 or (config.blocks - 1) * config.block_size < MIN_CAPACITY:
        raise ValueError(
            f"--blocks {config.blocks} of {config.block_size} tokens: too small for any "
            f"request (block 0 is the null block, and a request needs {MIN_CAPACITY} tokens)"
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
    if traces(config):
        mode += ", trace level"
    print(
        f"simulating {config.requests:,} requests on a pool of {config.blocks:,} blocks "
        f"x {config.block_size} tokens, seed {config.seed}, {config.key_function} keys, {mode}",
        file=out,
        flush=True,  # a log piped elsewhere shows the run started, not only when it ends
    )
    # On a terminal's stderr only, so a log or a test's capture gets the demo's own lines alone.
    progress = Progress(f"{PROG} demo", "requests served", config.requests, sys.stderr)
    simulation = Simulation(config, out, progress)
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
    finally:
        progress.clear()
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
    chain, at_faulty_call = call_chain(error)
    report.stopped_at = chain
    # A trace-level error's history lines are its notes (Python 3.11+; on 3.10, its message's).
    cause = "\n".join([f"{type(error).__name__}: {error}", *getattr(error, "__notes__", ())])
    if report.fault_planted is None:
        return f"{verb} with no fault planted, by {cause}"
    if at_faulty_call:
        return f"{verb} at the faulty call, by {cause}"
    later = report.pool_calls - report.pool_calls_at_fault
    if later == 0:
        return f"{verb} within the pool call that planted the {report.fault_planted}, by {cause}"
    return f"{verb} {later:,} pool calls after the {report.fault_planted} was planted, by {cause}"


def _audit(simulation: Simulation) -> tuple[str, int]:
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
    parser.add_argument(
        "--requests",
        type=int,
        default=defaults.requests,
        help="requests to serve (default: %(default)s)",
    )
    parser.add_argument(
        "--blocks",
        type=int,
        default=defaults.blocks,
        help="KV-cache blocks in the pool (default: %(default)s)",
    )
    parser.add_argument(
        "--block-size",
        type=int,
        default=defaults.block_size,
        help="tokens per block (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=defaults.seed, help="random seed (default: %(default)s)"
    )
    parser.add_argument(
        "--no-checks",
        dest="checks",
        action="store_false",
        help="run on the production queue, without check mode (faster; default: check mode on)",
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
        help="prefix-cache key function: sha256 (collision resistant) or builtin "
        "(Python's hash: faster, for one trusted tenant only) (default: %(default)s)",
    )
    parser.add_argument(
        "--inject",
        choices=sorted(FAULTS),
        help="plant a caller bug halfway through the run (default: none): "
        + "; ".join(f"{name}: {what}" for name, what in FAULTS.items()),
    )


def _config(args: argparse.Namespace) -> DemoConfig:
    """The configuration the parsed arguments ask for."""
    return DemoConfig(
        requests=args.requests,
        blocks=args.blocks,
        block_size=args.block_size,
        seed=args.seed,
        checks=args.checks,
        inject=args.inject,
        trace=args.trace,
        key_function=args.key_function,
    )


def validate(args: argparse.Namespace) -> str | None:
    """Say what is wrong with the parsed arguments' values, or return ``None``.

    The command line calls it before it prints anything, so a refused run prints
    one line on stderr and nothing else.

    Runtime complexity: O(1)
    """
    try:
        _validate(_config(args))
    except ValueError as error:
        return str(error)
    return None


def run(args: argparse.Namespace) -> int:
    """Run the demo from parsed arguments; return 0 (clean), 1 (fault or damage), 2 (usage), 130.

    130: stopped by Ctrl-C, after printing the report of the requests served so far.

    Runtime complexity: that of :func:`run_demo`
    """
    config = _config(args)
    problem = validate(args)
    if problem is not None:
        return usage_error(f"{PROG} demo", problem)
    return run_demo(config).status
