"""``python -I bench/pool_revision.py [REV]``: this build's block pool against ``REV``'s.

A change to the block pool that must not cost speed (a repair made ready for an
interrupt, a guard added) is measured side by side in one process: the installed
``BlockPool``, and the one of git revision ``REV`` (default ``HEAD``), its
``kvcache/pool.py`` (and ``kvcache/_repair.py``, where the revision has one) read with
``git show`` and executed as fresh modules beside the installed package
(:func:`bench.revision.load_modules`); the installed pool's own sources are executed
the same way, so that the two differ in their code only. Both run on the installed
queue, so the comparison holds on either build: the pool is interpreted on both.

The workloads are a request's life in the pool, at ``k`` blocks a request:

* ``alloc + free``: ``get_new_blocks(k)``, then ``free_blocks`` of them in reverse
  (caching off: every block freed to the front);
* ``hit, evict, cache``: with caching on, three prompts of ``k`` blocks take turns in
  a pool of ``2k`` blocks, as a prefix cache under pressure does: each step looks up
  its prompt (``find_longest_cache_hit``), ``touch``-es the hit, allocates the rest
  (``get_new_blocks``, evicting the hashes of older prompts), caches them
  (``cache_full_blocks``) and frees the request (``free_blocks``, to the back);
* ``cached again``: with caching on, one prompt allocated, cached and freed over and
  over without a lookup, so that every key is cached by more and more blocks (up to
  ``2k`` / ``k`` of them) and each allocation evicts from a shared entry; then a hit,
  ``touch`` and a second free. Not what an engine does (it looks up first), but
  where an eviction's cost grows with the blocks sharing its key.

Each sample repeats its step until about ``ops_per_sample`` blocks went through it;
the subjects are interleaved in rotating order, the collector off; each row gives
the median time of one step and its ratio to ``REV`` (above 1.00x: this build is
slower).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parent.parent))  # bench/, beside the wheel

import verified_queue
import verified_queue.kvcache.pool  # the package the revision's modules stand in
from bench.revision import INSTALLED, load_modules
from bench.run import FULL, QUICK, format_table
from bench.subjects import BenchBlock, Subject
from bench.workloads import Settings, WorkloadResult, collector_off
from verified_queue.kvcache.keys import hash_request_tokens
from verified_queue.queue import FreeBlockQueue

__all__ = ["load_pool", "main", "measure"]

#: The pool's modules a revision may hold, loaded in this order (each imports those before it).
POOL_MODULES = ("kvcache._repair", "kvcache.pool")
#: Blocks per request, the workloads' ``n``.
SIZES = (1, 4, 16, 128)
#: Blocks in each pool: room for the largest request twice, and the null block.
POOL_BLOCKS = 2 * max(SIZES) + 1


def load_pool(revision: str) -> type[Any]:
    """The ``BlockPool`` class of ``revision``, executed from source."""
    loaded = load_modules(revision, POOL_MODULES)
    if "kvcache.pool" not in loaded:
        raise SystemExit(f"git revision {revision!r} has no verified_queue/kvcache/pool.py")
    pool_class: type[Any] = loaded["kvcache.pool"].BlockPool
    return pool_class


def alloc_free(pool_class: type[Any], k: int) -> Callable[[], None]:
    """One step of ``alloc + free``: take ``k`` blocks, free them in reverse."""
    pool = pool_class(POOL_BLOCKS, enable_caching=False)
    get_new_blocks = pool.get_new_blocks
    free_blocks = pool.free_blocks

    def step() -> None:
        blocks = get_new_blocks(k)
        blocks.reverse()
        free_blocks(blocks)

    return step


def hit_evict_cache(pool_class: type[Any], k: int) -> Callable[[], None]:
    """One step of ``hit, evict, cache``: one of three prompts served through the cache."""
    pool = pool_class(2 * k + 1, enable_caching=True)
    prompts = [hash_request_tokens([prompt] * k, 1) for prompt in range(3)]
    turn = [0]

    def step() -> None:
        hashes = prompts[turn[0] % 3]
        turn[0] += 1
        hit = pool.find_longest_cache_hit(hashes)
        pool.touch(hit)
        blocks = hit + pool.get_new_blocks(k - len(hit))
        pool.cache_full_blocks(blocks, hashes, len(hit), k)
        blocks.reverse()
        pool.free_blocks(blocks)

    return step


def cached_again(pool_class: type[Any], k: int) -> Callable[[], None]:
    """One step of ``cached again``: allocate, cache and free ``k`` blocks, then hit and free."""
    pool = pool_class(POOL_BLOCKS, enable_caching=True)
    hashes = hash_request_tokens(list(range(k)), 1)

    def step() -> None:
        blocks = pool.get_new_blocks(k)
        pool.cache_full_blocks(blocks, hashes, 0, k)
        blocks.reverse()
        pool.free_blocks(blocks)
        hit = pool.find_longest_cache_hit(hashes)
        pool.touch(hit)
        hit.reverse()
        pool.free_blocks(hit)

    return step


WORKLOADS = {
    "alloc + free": alloc_free,
    "hit, evict, cache": hit_evict_cache,
    "cached again": cached_again,
}


def run_workload(
    name: str, subjects: list[tuple[str, type[Any]]], settings: Settings
) -> WorkloadResult:
    """Time workload ``name`` for every subject and request size, interleaved."""
    result = WorkloadResult(name, "µs per step")
    make = WORKLOADS[name]
    for k in SIZES:
        loops = settings.loops(k)
        steps = [(subject, make(pool_class, k)) for subject, pool_class in subjects]
        for _, step in steps:
            step()  # warm: the first eviction, the caches
        with collector_off():
            for repetition in range(settings.repetitions):
                shift = repetition % len(steps)
                for subject, step in steps[shift:] + steps[:shift]:
                    start = time.perf_counter()
                    for _ in range(loops):
                        step()
                    result.record(subject, k, (time.perf_counter() - start) / loops)
    result.finish()
    return result


def measure(revision: str, settings: Settings) -> tuple[list[WorkloadResult], list[Subject]]:
    """Time the installed pool and the one at ``revision`` on every workload, side by side."""
    old = load_pool(revision)
    new = load_pool(INSTALLED)
    named = [(f"pool at {revision}", old), ("this build", new)]
    # Subjects name the rows of bench.run.format_table; these build no queue of their own.
    subjects = [Subject(name, BenchBlock, FreeBlockQueue) for name, _ in named]
    return [run_workload(name, named, settings) for name in WORKLOADS], subjects


def main(argv: list[str] | None = None) -> int:
    """Print one table per workload: medians, and ratios to the revision's pool."""
    parser = argparse.ArgumentParser(prog="python -I bench/pool_revision.py", description=__doc__)
    parser.add_argument("revision", nargs="?", default="HEAD", help="a git revision (HEAD)")
    parser.add_argument("--full", action="store_true", help="the benchmark's full settings")
    parser.add_argument("--repetitions", type=int, help="samples per subject (a noisy machine)")
    arguments = parser.parse_args(argv)
    settings = FULL if arguments.full else QUICK
    if arguments.repetitions is not None:
        settings = dataclasses.replace(settings, repetitions=arguments.repetitions)
    print(
        f"verified_queue {verified_queue.__version__}, queue compiled: {verified_queue.COMPILED}, "
        f"Python {sys.version.split()[0]}, {settings.repetitions} repetitions, interleaved, "
        "GC off, median"
    )
    results, subjects = measure(arguments.revision, settings)
    for result in results:
        print(format_table(result, subjects, subjects[0].name), end="\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
