"""What prefix-cache keys cost: each key function per token, and the demo's total with each.

Run from a checkout: ``python bench/keys.py`` (``--quick`` for a short run).

Two measurements, each with every key function of ``verified_queue.kvcache.keys`` in
one process, interleaved (each repetition times every function once, in
rotating order), with the garbage collector off during each timing; the tables
give medians over the repetitions and their ratio to the default, SHA-256:

* **per token**: the keys of a long prompt, ``hash_request_tokens`` over
  ``--prompt-blocks`` full blocks of ``--block-size`` random token ids below
  ``--vocabulary`` (a tokenizer's range), chained from the root; the time per
  token is the whole call divided by the tokens hashed;
* **the demo**: ``python -m verified_queue demo --no-checks`` with the default
  workload (2,000 requests, or ``--quick``'s 500) run with each key function;
  the wall time of the whole simulation and its prefix-cache hit rate (the
  same for every function, unless two prefixes collided).
"""

from __future__ import annotations

import argparse
import gc
import io
import platform
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace

import verified_queue
from verified_queue.cli.demo import DemoConfig, DemoReport, run_demo
from verified_queue.kvcache.keys import DEFAULT_KEY_FUNCTION, KEY_FUNCTIONS, hash_request_tokens

DEFAULT_NAME = next(
    name for name, function in KEY_FUNCTIONS.items() if function is DEFAULT_KEY_FUNCTION
)


def time_per_token(
    tokens: Sequence[int], block_size: int, repetitions: int, calls: int
) -> dict[str, list[float]]:
    """Return, per key function, the seconds per token of each repetition."""
    names = list(KEY_FUNCTIONS)
    samples: dict[str, list[float]] = {name: [] for name in names}
    hashed = len(tokens) // block_size * block_size
    for repetition in range(repetitions):
        for offset in range(len(names)):
            name = names[(repetition + offset) % len(names)]
            function = KEY_FUNCTIONS[name]
            gc.collect()
            gc.disable()
            try:
                started = time.perf_counter()
                for _ in range(calls):
                    hash_request_tokens(tokens, block_size, function)
                elapsed = time.perf_counter() - started
            finally:
                gc.enable()
            samples[name].append(elapsed / (calls * hashed))
    return samples


def time_demo(config: DemoConfig, repetitions: int) -> dict[str, list[DemoReport]]:
    """Return, per key function, the report of each repetition of the demo run with it."""
    names = list(KEY_FUNCTIONS)
    reports: dict[str, list[DemoReport]] = {name: [] for name in names}
    for repetition in range(repetitions):
        for offset in range(len(names)):
            name = names[(repetition + offset) % len(names)]
            gc.collect()
            report = run_demo(replace(config, key_function=name), io.StringIO())
            if report.status != 0:
                raise SystemExit(f"bench: the demo with {name} keys failed: {report.result}")
            reports[name].append(report)
    return reports


def main(argv: Sequence[str] | None = None) -> int:
    """Run both measurements and print their tables; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, a smaller demo")
    parser.add_argument("--block-size", type=int, default=16, help="tokens per block (16)")
    parser.add_argument("--prompt-blocks", type=int, default=256, help="blocks per prompt (256)")
    parser.add_argument("--vocabulary", type=int, default=152_064, help="token ids below this")
    parser.add_argument("--seed", type=int, default=0, help="seed of the token ids")
    args = parser.parse_args(argv)
    repetitions = 5 if args.quick else 11
    demo_repetitions = 3 if args.quick else 5
    config = DemoConfig(checks=False, requests=500 if args.quick else 2000)

    rng = random.Random(args.seed)
    tokens = [rng.randrange(args.vocabulary) for _ in range(args.prompt_blocks * args.block_size)]
    build = "compiled" if verified_queue.COMPILED else "pure Python"
    print(
        f"verified_queue {verified_queue.__version__} ({build}), Python {platform.python_version()}"
        f" on {platform.machine()}, {sys.platform}"
    )
    print()
    print(
        f"Key computation: {args.prompt_blocks} blocks of {args.block_size} tokens per call, "
        f"median of {repetitions} repetitions"
    )
    print()
    print("| key function | ns per token | ns per block | ratio to sha256 |")
    print("| --- | ---: | ---: | ---: |")
    per_token = time_per_token(tokens, args.block_size, repetitions, calls=20)
    reference = statistics.median(per_token[DEFAULT_NAME])
    for name, samples in per_token.items():
        median = statistics.median(samples)
        print(
            f"| {name} | {median * 1e9:,.0f} | {median * args.block_size * 1e9:,.0f} "
            f"| {median / reference:.2f}x |"
        )
    print()
    print(
        f"The demo (--no-checks, {config.requests:,} requests, {config.blocks:,} blocks x "
        f"{config.block_size} tokens, seed {config.seed}), median of {demo_repetitions} runs"
    )
    print()
    print("| key function | wall time (s) | ratio to sha256 | prefix-cache hit rate | blocks hit |")
    print("| --- | ---: | ---: | ---: | ---: |")
    demo = time_demo(config, demo_repetitions)
    reference = statistics.median(report.seconds for report in demo[DEFAULT_NAME])
    for name, reports in demo.items():
        seconds = statistics.median(report.seconds for report in reports)
        report = reports[0]
        print(
            f"| {name} | {seconds:.2f} | {seconds / reference:.2f}x | {report.hit_rate:.1%} "
            f"| {report.blocks_hit:,} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
