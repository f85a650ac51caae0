"""Which verification layer catches which planted bug of the newer code.

The page is ``docs/new-code-bug-matrix.md``.

Every bug of :data:`specs.planted_bugs.new_code.NEW_CODE_CATALOGUE` (the vLLM plugin, vLLM's
counter in check mode, the trace level, the pool's ownership through its weak reference, the
undo's helpers, ``has_links``) is run against every layer of :data:`LAYERS` that can reach it:

- the model-based machines (:data:`MODEL_BASED`), each derandomized and unshrunk under
  :func:`specs.layer_matrix.fixed_draws`, with :data:`~specs.layer_matrix.MACHINE_EXAMPLES`
  examples of up to :data:`~specs.layer_matrix.MACHINE_STEPS` steps (the pool machine with the
  queue matrix's pool budget): the plugin machine, the counter machine, the trace machine, the
  pool machine, and the queue matrix's queue machine and check-mode machine;
- the exhaustive checks (:data:`EXHAUSTIVE`): the fault model's bounded check over every
  combination of checkpoints (:func:`specs.proof.bounded.check_faults`), every operation from
  every state of 3 blocks (:func:`specs.exhaustive.check_every_state`), every short sequence
  of pool steps (:func:`specs.pool_driver.enumerate_sequences`);
- the example test files (:data:`EXAMPLES`), each run by pytest, stopping at the first failure.

Each bug runs in a process of its own (:func:`run_bug`): the bug is planted for good there
(:func:`specs.planted_bugs.new_code.plant`) before any layer is imported, so a layer that reads
the code objects at import (the fault injection's checkpoints) sees the planted code, and no
bug outlives its run. The production code runs the same way (:data:`CONTROL`): every layer must
pass on it, so that a catch is the bug's. Two processes run at a time.

A layer that cannot reach a bug at all (it never runs the file the bug is in) is ``n/a``,
with the reason in :data:`NOT_APPLICABLE`; a layer that runs on a bug and misses it says why in
:data:`MISSES`. ``tests/verification/test_new_code_matrix.py`` recomputes the matrix, requires
each bug to be caught by at least three layers, one of them model-based or exhaustive, every
miss to be explained, and the page to be :func:`render`'s.

``python -m specs.new_code_matrix --write docs/new-code-bug-matrix.md`` regenerates the page.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.wheel import PINNED_VERSIONS, TOX_WHEEL_DIR, WheelNotFoundError, find_wheel
from specs.exhaustive_plugin import ACTIONS as PLUGIN_ACTIONS
from specs.layer_matrix import (
    MACHINE_EXAMPLES,
    MACHINE_STEPS,
    Cell,
    fixed_draws,
    machine_settings,
    render_explanations,
    render_table,
)
from specs.planted_bugs.new_code import (
    AREAS,
    NEW_CODE_CATALOGUE,
    NEW_CODE_GAPS,
    SourceBug,
    plant,
    plugin_change,
)

__all__ = [
    "CONTROL",
    "EXAMPLES",
    "EXHAUSTIVE",
    "LAYERS",
    "MISSES",
    "MODEL_BASED",
    "NOT_APPLICABLE",
    "cells",
    "compute",
    "main",
    "render",
    "run_bug",
]

ROOT = Path(__file__).resolve().parents[1]


def _fetched_wheels() -> str | None:
    """``.tox/vllm-wheel`` when it holds a wheel of every pinned release, else ``None``.

    ``tox -e vllm`` fetches them all; ``tox -e bench-vllm`` fetches 0.34.0 alone, and the
    layer's tests, handed the directory, would fail on the release it lacks.
    """
    try:
        for version in PINNED_VERSIONS:
            find_wheel(TOX_WHEEL_DIR, version)
    except WheelNotFoundError:
        return None
    return str(TOX_WHEEL_DIR)


#: The pinned vLLM wheels, if configured or fetched: the layers that run vLLM's own files need them.
WHEEL: str | None = os.environ.get("VERIFIED_QUEUE_VLLM_WHEEL") or _fetched_wheels()

#: The depth of each exhaustive sequence layer (the plugin's with vLLM's block; one less with
#: the derived block, each of whose runs derives a class).
PLUGIN_DEPTH, COUNTER_DEPTH, TRACE_DEPTH = 3, 3, 3

#: The name of the run of the production code, with nothing planted.
CONTROL = "(none)"

#: The pool machine's examples and steps, as in the queue matrix's client table.
POOL_MACHINE_EXAMPLES, POOL_MACHINE_STEPS = 100, 30


@dataclass(frozen=True)
class Layer:
    """A layer: its kind, what it runs (for the page), and the areas it reaches."""

    kind: str  # "model", "exhaustive" or "examples"
    runs: str
    reaches: frozenset[str]


_ALL = frozenset(AREAS)
_QUEUE = frozenset({"undo", "links"})
_VLLM = frozenset({"plugin", "adapter", "pool queue", "trace", "undo", "links"})

#: Every layer, in the page's order: model-based, exhaustive, examples.
LAYERS: dict[str, Layer] = {
    "plugin machine": Layer(
        "model",
        "`tests/vllm/test_plugin_machine.py`'s `PluginMachine` on the stand-in vLLM 0.34.0, "
        "with vLLM's block and with the derived block; a plugin bug as the machine's own "
        "`PluginSource` change",
        _VLLM,
    ),
    "counter machine": Layer(
        "model",
        "`tests/vllm/test_counter_machine.py`'s `CounterMachine`, on the checked and the trace "
        "mode's queue",
        frozenset({"adapter", "trace", "undo", "links"}),
    ),
    "trace machine": Layer(
        "model",
        "`tests/checks/test_trace_machine.py`'s `TraceMachine` (faults at the checkpoints of "
        "the queue, its undo and the caller walk included)",
        frozenset({"trace", "undo", "links"}),
    ),
    "pool machine": Layer(
        "model",
        "`tests/kvcache/test_pool_machine.py`'s machines (caching on and off, ownership) against "
        f"`specs/pool_model.py`, {POOL_MACHINE_EXAMPLES} examples of up to "
        f"{POOL_MACHINE_STEPS} steps",
        frozenset({"pool", "undo", "links"}),
    ),
    "queue machine": Layer(
        "model",
        "the queue matrix's `QueueAcrossChanges` over the production queue",
        _QUEUE,
    ),
    "check mode": Layer(
        "model",
        "the queue matrix's `CheckedQueueMisuse` over the production queue",
        _QUEUE,
    ),
    "fault model": Layer(
        "exhaustive",
        "`specs/proof/bounded.py`'s `check_faults`: up to three exceptions at every combination "
        "of checkpoints of every call on queues of up to 3 blocks, batches of up to 2",
        _QUEUE,
    ),
    "exhaustive": Layer(
        "exhaustive",
        "`specs/exhaustive.py`'s `check_every_state` over 3 blocks, batches up to 2",
        _QUEUE,
    ),
    "pool sequences": Layer(
        "exhaustive",
        "`specs/pool_driver.py`'s `enumerate_sequences`: every sequence of up to 3 pool steps",
        frozenset({"pool", "undo", "links"}),
    ),
    "stray enumeration": Layer(
        "exhaustive",
        "`specs/pool_driver.py`'s `enumerate_strays`: every kind of stray block to every pool "
        "entry, at each position, beside each other pool, from two starting pools",
        frozenset({"pool", "undo", "links"}),
    ),
    "plugin sequences": Layer(
        "exhaustive",
        "`specs/exhaustive_plugin.py`'s `check_plugin`: the plugin machine's rules, model and "
        f"checks through every sequence of up to {PLUGIN_DEPTH} of {len(PLUGIN_ACTIONS)} actions "
        f"(up to {PLUGIN_DEPTH - 1} with the derived block) on the stand-in vLLM 0.34.0",
        _VLLM,
    ),
    "counter sequences": Layer(
        "exhaustive",
        "`specs/exhaustive_counter.py`'s `check_counter`: every sequence of up to "
        f"{COUNTER_DEPTH} writes of the count (refused ones included) and operations on vLLM's "
        "checked and traced queues of 3 blocks, full and empty, against a list model with the "
        "offset",
        frozenset({"adapter", "trace", "undo", "links"}),
    ),
    "trace sequences": Layer(
        "exhaustive",
        "`specs/exhaustive_trace.py`'s `check_trace`: every sequence of up to "
        f"{TRACE_DEPTH} traced calls (refused ones included) over 3 blocks, slotted and weak, "
        "against `specs/trace_model.py`'s recorder",
        frozenset({"trace", "undo", "links"}),
    ),
    "vLLM pool checks": Layer(
        "model",
        "`tests/vllm/test_pool_checks.py`: `PoolChecksMachine`, vLLM's own `BlockPool` (read "
        "from each pinned wheel, `.tox/vllm-wheel`) on the queue the plugin installs in the "
        "checked and the trace mode, against what must be reported; and the file's examples",
        _VLLM,
    ),
    "pool fast path": Layer(
        "model",
        "`tests/vllm/test_pool_fast_path.py`: `FastPathMachine`, vLLM's checked and traced "
        "queues on a stand-in pool against a reference that sends every operation through check "
        "mode's own path with a membership dict; and the file's examples of damage",
        frozenset({"adapter", "pool queue", "trace", "undo", "links"}),
    ),
    "adapter examples": Layer(
        "examples",
        "`tests/vllm/test_checked_adapter_edges.py`: where vLLM's checked and traced queues "
        "report each clause of a stand-in pool, and vLLM's counter",
        frozenset({"adapter", "pool queue", "trace", "undo", "links"}),
    ),
    "plugin examples": Layer(
        "examples",
        "`tests/vllm/test_plugin.py` (the stand-in vLLM and each pinned wheel) and "
        "`tests/vllm/test_plugin_register.py`",
        _VLLM,
    ),
    "CLI examples": Layer(
        "examples",
        "`tests/cli/test_status.py` and `tests/cli/test_demo.py`",
        frozenset({"plugin", "trace", "undo", "links"}),
    ),
    "trace examples": Layer(
        "examples", "`tests/checks/test_trace.py`", frozenset({"trace", "undo", "links"})
    ),
    "ownership examples": Layer(
        "examples", "`tests/kvcache/test_pool_ownership.py`", frozenset({"pool", "undo", "links"})
    ),
    "pool misuse examples": Layer(
        "examples",
        "`tests/kvcache/test_pool_misuse.py` (under the trace level too)",
        frozenset({"pool", "trace", "undo", "links"}),
    ),
    "pool interrupt examples": Layer(
        "examples",
        "`tests/kvcache/test_pool_interrupts.py`, and "
        "`tests/kvcache/test_pool_nested_interrupts.py`'s one and two exceptions at every "
        "checkpoint of the pool, the queue and the undo",
        frozenset({"pool", "undo", "links"}),
    ),
    "interrupt examples": Layer(
        "examples",
        "`tests/queue/test_nested_interrupts.py` and `tests/queue/test_interrupts.py`",
        _QUEUE,
    ),
    "misuse examples": Layer(
        "examples",
        "`tests/checks/test_checked_misuse.py` and `tests/checks/test_messages.py`",
        _QUEUE,
    ),
    "queue examples": Layer(
        "examples",
        "`tests/queue/test_wrong_arguments.py`, `test_queue.py` and `test_queue_diagnostics.py`",
        _QUEUE,
    ),
    "docs examples": Layer(
        "examples",
        "`tests/docs/test_docs.py`: the examples of the README, the docs pages and every "
        "module's docstrings",
        _ALL,
    ),
}

MODEL_BASED = tuple(name for name, layer in LAYERS.items() if layer.kind == "model")
EXHAUSTIVE = tuple(name for name, layer in LAYERS.items() if layer.kind == "exhaustive")
EXAMPLES = tuple(name for name, layer in LAYERS.items() if layer.kind == "examples")
#: The layers run by pytest on test files (every examples layer, and a machine that is a test).
PYTEST_LAYERS = (*EXAMPLES, "vLLM pool checks", "pool fast path")

#: The test files of each examples layer.
_FILES: dict[str, tuple[str, ...]] = {
    "vLLM pool checks": ("tests/vllm/test_pool_checks.py",),
    "pool fast path": ("tests/vllm/test_pool_fast_path.py",),
    "adapter examples": ("tests/vllm/test_checked_adapter_edges.py",),
    "plugin examples": ("tests/vllm/test_plugin.py", "tests/vllm/test_plugin_register.py"),
    "CLI examples": ("tests/cli/test_status.py", "tests/cli/test_demo.py"),
    "pool misuse examples": ("tests/kvcache/test_pool_misuse.py",),
    "pool interrupt examples": (
        "tests/kvcache/test_pool_interrupts.py",
        "tests/kvcache/test_pool_nested_interrupts.py::"
        "test_an_exception_at_every_checkpoint_and_a_second_at_every_later_one",
    ),
    "queue examples": (
        "tests/queue/test_wrong_arguments.py",
        "tests/queue/test_queue.py",
        "tests/queue/test_queue_diagnostics.py",
    ),
    "trace examples": ("tests/checks/test_trace.py",),
    "ownership examples": ("tests/kvcache/test_pool_ownership.py",),
    "interrupt examples": (
        "tests/queue/test_nested_interrupts.py",
        "tests/queue/test_interrupts.py",
    ),
    "misuse examples": ("tests/checks/test_checked_misuse.py", "tests/checks/test_messages.py"),
    "docs examples": ("tests/docs/test_docs.py",),
}

# --------------------------------------------------------------------------- why not


def _never(what: str) -> str:
    return f"it never runs {what}"


_NO_PLUGIN = _never("the plugin (`install`, `register`, `uninstall`)")
_NO_VLLM_QUEUE = _never("vLLM's checked or traced queue, where vLLM's counter lives")
_NO_POOL_QUEUE = _never("vLLM's checked or traced queue built from a pool's blocks")
_NO_TRACE = _never("a traced queue: it builds the production queue or check mode only")
_NO_POOL = _never("`verified_queue/kvcache/pool.py`: it builds no block pool")
_POOL_ONLY_TRACE = (
    "it builds its pools on the production queue (or check mode), never on a traced queue"
)

#: The layers that cannot reach a bug's area at all: (layer, area) -> reason.
_NOT_REACHED: dict[tuple[str, str], str] = {}
for _name, _layer in LAYERS.items():
    for _area in set(AREAS) - _layer.reaches:
        _NOT_REACHED[_name, _area] = {
            "plugin": _NO_PLUGIN,
            "adapter": _NO_VLLM_QUEUE,
            "pool queue": _NO_POOL_QUEUE,
            "trace": _NO_TRACE,
            "pool": _NO_POOL,
        }.get(_area, "NOT EXPLAINED")
for _name in (
    "pool machine",
    "pool sequences",
    "stray enumeration",
    "ownership examples",
    "pool interrupt examples",
):
    _NOT_REACHED[_name, "trace"] = _POOL_ONLY_TRACE
    _NOT_REACHED[_name, "adapter"] = _NO_VLLM_QUEUE
    _NOT_REACHED[_name, "pool queue"] = _NO_POOL_QUEUE
    _NOT_REACHED[_name, "plugin"] = _NO_PLUGIN
for _name in ("pool misuse examples", "CLI examples"):
    _NOT_REACHED[_name, "adapter"] = _NO_VLLM_QUEUE
    _NOT_REACHED[_name, "pool queue"] = _NO_POOL_QUEUE
_NOT_REACHED["pool misuse examples", "plugin"] = _NO_PLUGIN
_NOT_REACHED["CLI examples", "pool"] = (
    "its pools are the demo's and the simulation's, freed of their own blocks only: it never "
    "asks which pool owns a block"
)

#: Every (layer, bug) a layer cannot reach, with the reason.
NOT_APPLICABLE: dict[tuple[str, str], str] = {
    (layer, name): _NOT_REACHED[layer, bug.area]
    for layer in LAYERS
    for name, bug in {**NEW_CODE_CATALOGUE, **NEW_CODE_GAPS}.items()
    if (layer, bug.area) in _NOT_REACHED
}

#: What a layer must do to see each bug: a layer that runs on a bug and passes does not.
SEEN_BY: dict[str, str] = {
    "plugin_forgets_kv_cache_utils_executed_again": "reload `kv_cache_utils` while installed "
    "and then look at what it binds",
    "plugin_uninstall_leaves_the_finder": "look at `sys.meta_path` or the installed mode after "
    "`uninstall`",
    "plugin_takes_an_unknown_value_for_production": "give `register` a misspelt value",
    "plugin_imports_vllm_before_reading_the_mode": "call `register` with the plugin off (or a "
    "bad value) and look at what was imported",
    "plugin_recognises_vllms_queue_by_name": "load a vLLM module that defines a class of that "
    "name itself and install",
    "adapter_accepts_a_negative_count": "write a negative count to vLLM's queue from outside",
    "adapter_takes_outside_writes_for_its_own": "write the count of vLLM's queue from outside "
    "and then read it or check the queue",
    "adapter_reads_skip_the_offset": "read the count of vLLM's queue from outside after an "
    "outside write",
    "pool_queue_fast_path_takes_a_held_block": "take a block whose `ref_cnt` is not 0 from the "
    "front of a pool's queue with no full check due",
    "pool_queue_fast_path_skips_the_prefix_cache": "link a block whose hash the prefix cache does "
    "not map into a pool's queue with no full check due",
    "pool_queue_fast_path_lets_the_null_block_join": "link the pool's null block into its queue "
    "with no full check due",
    "pool_queue_fast_path_removes_a_held_block": "remove a block whose `ref_cnt` is not 0 from a "
    "pool's queue with no full check due",
    "pool_queue_fast_path_keeps_the_pools_countdown": "count the unlinks to the next full check "
    "of a pool's queue, or run one more unlink than its period",
    "pool_queue_fast_path_trusts_the_count_to_the_tail": "raise a pool queue's own count above its "
    "chain and take the whole chain",
    "pool_queue_full_check_leaves_out_the_queue": "damage a pool queue's chain (or its own count) "
    "where only the full check sees it, and run the pool's full check",
    "pool_queue_fast_path_prepends_to_an_empty_chain_miscounted": "raise a pool queue's own "
    "count while its chain is empty and prepend to it",
    "trace_history_ignores_weak_holders": "ask a traced queue for the record of a departed block "
    "that takes weak references",
    "trace_taken_since_compared_backwards": "free a block into a traced queue it left while it is "
    "linked in another queue, and read the error's lines",
    "trace_departed_dropped_one_early": "count the departed slotted blocks a traced queue holds, "
    "at its bound",
    "trace_production_writes_noted_as_outside": "compare the count's outside writer a traced "
    "error names with what was written from outside",
    "pool_routes_by_a_strong_reference": "free into one pool a block of another, live pool",
    "pool_owns_one_id_too_many": "ask `owns` of a block whose id is the pool's size",
    "pool_owns_trusts_the_weak_reference": "ask `owns` of a stranger that names the pool's weak "
    "reference",
    "pool_free_plans_by_the_reference_only": "free a stranger that names the pool's weak reference",
    "undo_finish_unstage_expects_staging_everywhere": "cut short the undo of a batch of two or "
    "more blocks, so that the restartable undo runs",
    "undo_relink_forgets_the_successor_read_before": "cut `popleft_n` short after its walk "
    "cleared the last taken block's forward link",
    "undo_means_not_a_block_reads_past_the_batch": "cut a batch short after every block of it was "
    "staged, at the undo's test of what the item was",
    "undo_unstage_clears_the_back_link_first": "cut the fast undo short between a block's two "
    "link writes (a link setter that raises)",
    "links_has_links_lets_a_lookup_error_out": "give a queue or a checker an object whose link "
    "lookup raises something other than `AttributeError`",
    "links_has_links_reads_prev_only": "give a queue or a checker an object with "
    "`prev_free_block` alone",
}


def miss_reason(layer: str, name: str) -> str:
    """Why ``layer``, which ran on bug ``name`` and passed, missed it: what it never does."""
    what = {"model": "step", "exhaustive": "sequence", "examples": "test"}[LAYERS[layer].kind]
    return f"no {what} of it does what shows the bug: {SEEN_BY.get(name, 'NOT EXPLAINED')}"


#: Why each layer misses each bug it runs on and misses: (layer, bug) -> reason.
MISSES: dict[tuple[str, str], str] = {
    (layer, name): miss_reason(layer, name)
    for layer in LAYERS
    for name in {**NEW_CODE_CATALOGUE, **NEW_CODE_GAPS}
    if (layer, name) not in NOT_APPLICABLE
}

#: What is missing for a catalogue bug that is below the bar, where known (none is, today:
#: the stray enumeration is the pool ownership bugs' third layer).
BELOW_REASONS: dict[str, str] = {}

#: Why each gap is one: what no layer does that would show it.
GAP_REASONS: dict[str, str] = {
    "plugin_recognises_vllms_queue_by_name": "Only the plugin machine and the plugin sequences "
    "load a vLLM module that defines its own `FreeKVCacheBlockQueue` (`vllm.v1.own_classes`); "
    "the plugin's examples and vLLM's own files have none.",
    "links_has_links_reads_prev_only": "Only `tests/checks/test_checked_misuse.py` gives the "
    "queues and the checkers an object with one link (each link alone, at every entry point "
    "that asks `has_links`); no machine or exhaustive check gives an object with one link "
    "(the counter and trace sequences give blocks and a proxy whose lookups raise), and a "
    "second copy of that test elsewhere would be the same layer twice.",
    "undo_unstage_clears_the_back_link_first": "The fault contract covers it (a link setter "
    "that raises, on the pure build), but only `tests/queue/test_nested_interrupts.py` raises "
    "at a link write: the fault model's bounded check and the machines raise at checkpoints "
    "only, and `block.next_free_block = block.prev_free_block = None` has no checkpoint "
    "between its two writes. A bounded check over blocks whose link setters raise would be "
    "the layer that closes it.",
}

# --------------------------------------------------------------------------- the layers


def _fails(test: Callable[[], object]) -> bool:
    """Whether ``test`` raises: the layer reports the bug."""
    try:
        test()
    except KeyboardInterrupt:
        raise
    except BaseException:  # any failure of the layer (pytest's Failed too) reports the bug
        return True
    return False


@contextlib.contextmanager
def _plugin_process(derived: bool) -> Iterator[None]:
    """The plugin machine's process fixture: the block derived or not, the variable unset."""
    verified_queue = importlib.import_module("verified_queue")
    variable = "VERIFIED_QUEUE_VLLM"
    saved = (getattr(verified_queue, "COMPILED"), os.environ.pop(variable, None))  # noqa: B009 -- mypy
    setattr(verified_queue, "COMPILED", derived)  # noqa: B010 -- a module import_module returns
    try:
        yield
    finally:
        setattr(verified_queue, "COMPILED", saved[0])  # noqa: B010
        if saved[1] is not None:
            os.environ[variable] = saved[1]


def _plugin_machine(bug: SourceBug | None) -> bool:
    tests = importlib.import_module("tests.vllm.test_plugin_machine")
    stateful = importlib.import_module("hypothesis.stateful")
    hypothesis = importlib.import_module("hypothesis")
    run = hypothesis.settings(
        tests.PLANTED_SETTINGS, max_examples=MACHINE_EXAMPLES, stateful_step_count=MACHINE_STEPS
    )
    source = tests.PluginSource(None if bug is None else plugin_change(bug))
    for derived in (False, True):
        with tempfile.TemporaryDirectory() as directory:
            layouts = (tests.stand_in_layout(Path(directory), "0.34.0"),)
            machine = tests.machine(layouts, derived, source)
            with _plugin_process(derived), fixed_draws():
                if _fails(lambda: stateful.run_state_machine_as_test(machine, settings=run)):  # noqa: B023 -- called at once
                    return True
    return False


def _counter_machine(_bug: SourceBug | None) -> bool:
    tests = importlib.import_module("tests.vllm.test_counter_machine")
    stateful = importlib.import_module("hypothesis.stateful")
    for queue_class in (tests.VllmCheckedFreeBlockQueue, tests.VllmTracedFreeBlockQueue):
        machine = type("Counter", (tests.CounterMachine,), {"queue_class": queue_class})
        run = functools.partial(
            stateful.run_state_machine_as_test, machine, settings=machine_settings()
        )
        with fixed_draws():
            if _fails(run):
                return True
    return False


def _trace_machine(_bug: SourceBug | None) -> bool:
    tests = importlib.import_module("tests.checks.test_trace_machine")
    support = importlib.import_module("tests.verification.stateful_support")
    with fixed_draws():
        return _fails(lambda: support.run_machine(tests.TraceMachine, settings=machine_settings()))


def _pool_machine(_bug: SourceBug | None) -> bool:
    tests = importlib.import_module("tests.kvcache.test_pool_machine")
    pool = importlib.import_module("verified_queue.kvcache.pool")
    hypothesis = importlib.import_module("hypothesis")
    shorter = hypothesis.settings(
        tests.RUN,
        max_examples=POOL_MACHINE_EXAMPLES,
        stateful_step_count=POOL_MACHINE_STEPS,
        derandomize=True,
        database=None,
        phases=machine_settings().phases,
    )
    with fixed_draws():
        return _fails(lambda: tests.run_pool_machine(pool.BlockPool, shorter))


def _queue_runner(layer: str) -> Callable[[SourceBug | None], bool]:
    def run(_bug: SourceBug | None) -> bool:
        runners = importlib.import_module("specs.layer_matrix").RUNNERS
        queue = importlib.import_module("verified_queue.queue").FreeBlockQueue
        return bool(runners[layer](queue))

    return run


def _bounded() -> Any:
    """``specs/proof/bounded.py``, loaded by its file: the proof package imports z3, it does not."""
    name = "specs_proof_bounded"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "specs" / "proof" / "bounded.py")
        if spec is None or spec.loader is None:  # pragma: no cover -- a .py file has one
            raise ImportError(name)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _fault_model(_bug: SourceBug | None) -> bool:
    return _bounded().check_faults().counterexample is not None


def _pool_sequences(_bug: SourceBug | None) -> bool:
    driver = importlib.import_module("specs.pool_driver")
    return driver.enumerate_sequences(3)[1] is not None


def _stray_enumeration(_bug: SourceBug | None) -> bool:
    driver = importlib.import_module("specs.pool_driver")
    return driver.enumerate_strays()[1] is not None


def _plugin_sequences(bug: SourceBug | None) -> bool:
    tests = importlib.import_module("tests.vllm.test_plugin_machine")
    exhaustive = importlib.import_module("specs.exhaustive_plugin")
    source = tests.PluginSource(None if bug is None else plugin_change(bug))
    with tempfile.TemporaryDirectory() as directory:
        layouts = (tests.stand_in_layout(Path(directory), "0.34.0"),)
        for derived, depth in ((False, PLUGIN_DEPTH), (True, PLUGIN_DEPTH - 1)):
            machine = tests.machine(layouts, derived, source)
            if exhaustive.check_plugin(machine, "0.34.0", depth).counterexample is not None:
                return True
    return False


def _counter_sequences(_bug: SourceBug | None) -> bool:
    exhaustive = importlib.import_module("specs.exhaustive_counter")
    return exhaustive.check_counter(COUNTER_DEPTH).counterexample is not None


def _trace_sequences(_bug: SourceBug | None) -> bool:
    exhaustive = importlib.import_module("specs.exhaustive_trace")
    return exhaustive.check_trace(TRACE_DEPTH).counterexample is not None


def _example_files(name: str, output: str) -> dict[str, bool]:
    """Run the test files of every pytest layer that reaches ``name``: layer -> caught.

    One pytest process per layer, the bug planted by :mod:`specs.new_code_plugin` as it loads,
    stopping at the first failure: the layer catches the bug when a test of its files fails.
    """
    layers = [layer for layer in PYTEST_LAYERS if _reached(layer, name)]
    if WHEEL is None:
        layers.remove("vLLM pool checks")  # it would skip: not run, not missed
    environment = {**os.environ, "VERIFIED_QUEUE_PLANT": "" if name == CONTROL else name}
    if WHEEL is not None:
        environment["VERIFIED_QUEUE_VLLM_WHEEL"] = WHEEL
    found: dict[str, bool] = {}
    for number, layer in enumerate(layers):
        report = f"{output}.{number}.json"
        environment["VERIFIED_QUEUE_PLANT_REPORT"] = report
        done = subprocess.run(
            [
                *(sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"),
                *("-p", "no:xdist", "-p", "specs.new_code_plugin", "-m", "not bug_matrix"),
                *_FILES[layer],
            ],
            cwd=ROOT,
            env=environment,
            capture_output=True,
            text=True,
            check=False,
        )
        if not os.path.exists(report):
            raise RuntimeError(f"{layer} on {name} did not run:\n{done.stdout[-3000:]}")
        ended = json.loads(Path(report).read_text(encoding="utf-8"))
        if ended["status"] not in (0, 1):
            raise RuntimeError(
                f"{layer} on {name} ended with {ended['status']}:\n{done.stdout[-3000:]}"
            )
        found[layer] = bool(ended["failed"])
    return found


_RUNNERS: dict[str, Callable[[SourceBug | None], bool]] = {
    "plugin machine": _plugin_machine,
    "counter machine": _counter_machine,
    "trace machine": _trace_machine,
    "pool machine": _pool_machine,
    "queue machine": _queue_runner("queue machine"),
    "check mode": _queue_runner("check mode"),
    "fault model": _fault_model,
    "exhaustive": _queue_runner("exhaustive"),
    "pool sequences": _pool_sequences,
    "stray enumeration": _stray_enumeration,
    "plugin sequences": _plugin_sequences,
    "counter sequences": _counter_sequences,
    "trace sequences": _trace_sequences,
}


class _Caught(Exception):
    """A layer's run that ended in a report of the bug."""


def _raise_if(caught: bool) -> None:
    if caught:
        raise _Caught


def _reached(layer: str, name: str) -> bool:
    if name == CONTROL:
        return True
    return (layer, name) not in NOT_APPLICABLE


def _child(name: str, output: str) -> None:
    """Run ``name`` (a bug, or :data:`CONTROL`) against every layer reaching it, in this process."""
    bug = None if name == CONTROL else {**NEW_CODE_CATALOGUE, **NEW_CODE_GAPS}[name]
    if bug is not None:
        plant(bug)
    results: dict[str, bool] = {}
    seconds: dict[str, float] = {}
    for layer, runner in _RUNNERS.items():
        if _reached(layer, name):
            started = time.perf_counter()
            # A layer that crashes on the bug reports it, as a failing test does.
            results[layer] = _fails(lambda: _raise_if(runner(bug)))  # noqa: B023 -- called at once
            seconds[layer] = round(time.perf_counter() - started, 1)
    started = time.perf_counter()
    results.update(_example_files(name, output))
    seconds["examples"] = round(time.perf_counter() - started, 1)
    Path(output).write_text(json.dumps({"results": results, "seconds": seconds}), encoding="utf-8")


def run_bug(name: str) -> dict[str, bool]:
    """Run one bug (or :data:`CONTROL`) against every layer that reaches it, in a new process.

    The process imports what this one imports (its ``sys.path``), so it runs the same
    ``verified_queue``, ``specs`` and ``tests``.
    """
    with tempfile.TemporaryDirectory() as directory:
        output = os.path.join(directory, "cells.json")
        code = (
            "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
            "from specs.new_code_matrix import _child; _child(sys.argv[2], sys.argv[3])"
        )
        environment = {**os.environ}
        for variable in ("VERIFIED_QUEUE_CHECKS", "VERIFIED_QUEUE_VLLM", "PYTEST_XDIST_WORKER"):
            environment.pop(variable, None)
        done = subprocess.run(
            [sys.executable, "-c", code, json.dumps(sys.path), name, output],
            cwd=ROOT,
            env=environment,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0 or not os.path.exists(output):
            raise RuntimeError(
                f"the run of {name} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
            )
        found = json.loads(Path(output).read_text(encoding="utf-8"))
    results: dict[str, bool] = found["results"]
    print(f"{name}: {found['seconds']}", file=sys.stderr)
    return results


@functools.cache
def _matrix(jobs: int) -> tuple[tuple[tuple[str, str], bool], ...]:
    names = [CONTROL, *NEW_CODE_CATALOGUE, *NEW_CODE_GAPS]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        columns = dict(zip(names, pool.map(run_bug, names), strict=True))
    return tuple(
        ((layer, name), found)
        for name, column in columns.items()
        for layer, found in column.items()
    )


def compute(jobs: int = 2) -> dict[tuple[str, str], bool]:
    """Every bug, and the production code (:data:`CONTROL`), against every layer that reaches it.

    Once per process; ``jobs`` processes at a time.
    """
    return dict(_matrix(jobs))


def cells(
    computed: dict[tuple[str, str], bool], names: Sequence[str] = tuple(NEW_CODE_CATALOGUE)
) -> dict[tuple[str, str], Cell]:
    """Every cell of the page: caught, missed, or n/a (the layer cannot reach the bug)."""
    matrix: dict[tuple[str, str], Cell] = {}
    for layer in LAYERS:
        for name in names:
            if (layer, name) in NOT_APPLICABLE:
                matrix[layer, name] = "n/a"
            elif (layer, name) in computed:
                matrix[layer, name] = "caught" if computed[layer, name] else "missed"
            else:
                matrix[layer, name] = "not run"
    return matrix


def below_the_bar(computed: dict[tuple[str, str], bool]) -> dict[str, list[str]]:
    """The catalogue's bugs caught by fewer than three layers, or by no model-based or
    exhaustive one: bug -> the layers that caught it."""
    exploring = (*MODEL_BASED, *EXHAUSTIVE)
    found: dict[str, list[str]] = {}
    for name in NEW_CODE_CATALOGUE:
        caught = [layer for layer in LAYERS if computed.get((layer, name))]
        if len(caught) < 3 or not any(layer in exploring for layer in caught):
            found[name] = caught
    return found


def render(computed: dict[tuple[str, str], bool]) -> str:
    """The page ``docs/new-code-bug-matrix.md``."""
    matrix = cells(computed)
    below = below_the_bar(computed)
    lines = [
        "# Planted bugs in the newer code by layer",
        "",
        "<!-- Generated by `python -m specs.new_code_matrix --write docs/new-code-bug-matrix.md`; "
        "`tests/verification/test_new_code_matrix.py` fails when this page and the layers "
        "disagree. -->",
        "",
        f"`specs/planted_bugs/new_code.py` plants {len(NEW_CODE_CATALOGUE)} realistic "
        "single-point bugs in the code the [queue's](bug-matrix.md) and the "
        "[checkers'](checker-bug-matrix.md) matrices do not plant in: the vLLM plugin, vLLM's "
        "counter and the one-pass path of a pool's queue in check mode, the trace level, the "
        "pool's ownership of a block through its "
        "weak reference, the undo's helpers, and `has_links`. Each is one hunk of the real "
        "source changed: the module's source is compiled with the change, and the code of the "
        "one function the hunk lies in is swapped into the function object for the run (so "
        "every caller meets it, those that imported it by name included); a plugin bug is "
        "given to the plugin machine as its own `PluginSource` change, which survives the "
        "machine's reloads. Each bug runs in a process of its own, planted before any layer is "
        "imported, and the production code is run the same way first: every layer passes on it.",
        "",
        f"The machines run derandomized with {MACHINE_EXAMPLES} examples of up to "
        f"{MACHINE_STEPS} steps (the pool machine {POOL_MACHINE_EXAMPLES} of up to "
        f"{POOL_MACHINE_STEPS}); the example files run under pytest, to their first failure. "
        "A bug's count is the layers that caught it of those that ran on it; `n/a` is a layer "
        "that never runs the file the bug is in. The bar is three layers, at least one of them "
        f"model-based or exhaustive: {len(NEW_CODE_CATALOGUE) - len(below)} of the "
        f"{len(NEW_CODE_CATALOGUE)} bugs meet it"
        + (
            "."
            if not below
            else f"; the {len(below)} that do not are listed [below the bar](#below-the-bar)."
        ),
        "",
        "| Area | Bugs | Planted in |",
        "| --- | --- | --- |",
    ]
    for area, where in AREAS.items():
        count = sum(1 for bug in NEW_CODE_CATALOGUE.values() if bug.area == area)
        lines.append(f"| {area} | {count} | {where} |")
    lines += ["", "## The layers", "", "| Layer | Kind | What runs |", "| --- | --- | --- |"]
    for name, layer in LAYERS.items():
        lines.append(f"| {name} | {layer.kind} | {layer.runs} |")
    lines += ["", "## The matrix", ""]
    rows = {name: [bug.area, f"`{bug.function}`"] for name, bug in NEW_CODE_CATALOGUE.items()}
    lines += render_table(["Bug", "Area", "Function"], rows, list(LAYERS), matrix)
    lines += ["", "## The bugs", ""]
    for name, bug in NEW_CODE_CATALOGUE.items():
        lines.append(f"- `{name}` (`{bug.module}`): {bug.what}.")
    if below:
        lines += [
            "",
            "## Below the bar",
            "",
            "These bugs of the catalogue are caught by fewer than three layers, or by no "
            "model-based or exhaustive one; `tests/verification/test_new_code_matrix.py` fails "
            "until a layer that can genuinely see each is added.",
            "",
        ]
        for name, caught in below.items():
            by = ", ".join(caught) or "no layer"
            lines.append(f"- `{name}`: caught by {by}. {BELOW_REASONS.get(name, '')}".rstrip())
    lines += ["", "## What each layer misses, and why", ""]
    reasons = {**MISSES, **NOT_APPLICABLE}
    lines += render_explanations(list(NEW_CODE_CATALOGUE), list(LAYERS), matrix, reasons)
    lines += _render_gaps(computed)
    return "\n".join(lines).rstrip("\n")


def _render_gaps(computed: dict[tuple[str, str], bool]) -> list[str]:
    """The bugs fewer than three layers catch: planted and run as the others, shown apart."""
    matrix = cells(computed, tuple(NEW_CODE_GAPS))
    lines = [
        "## Gaps: bugs fewer than three layers catch",
        "",
        f"These {len(NEW_CODE_GAPS)} bugs (`NEW_CODE_GAPS`) are planted and run exactly as the "
        "catalogue's, and fewer than three layers catch them: they are not in the catalogue, "
        "whose bar they miss, and the test requires each to stay below it, so that a layer "
        "that starts catching one moves it into the catalogue.",
        "",
    ]
    rows = {name: [bug.area, f"`{bug.function}`"] for name, bug in NEW_CODE_GAPS.items()}
    lines += render_table(["Bug", "Area", "Function"], rows, list(LAYERS), matrix)
    lines.append("")
    for name, bug in NEW_CODE_GAPS.items():
        lines.append(
            f"- `{name}` (`{bug.module}`): {bug.what}. {GAP_REASONS.get(name, 'NOT EXPLAINED')}"
        )
    lines += ["", "### What each layer misses of the gaps, and why", ""]
    reasons = {**MISSES, **NOT_APPLICABLE}
    lines += render_explanations(list(NEW_CODE_GAPS), list(LAYERS), matrix, reasons, "####")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: print the page, or ``--write`` it; ``--bug NAME`` prints one bug's column."""
    parser = argparse.ArgumentParser(prog="python -m specs.new_code_matrix", description=__doc__)
    parser.add_argument("--write", metavar="PATH", help="write the page to PATH")
    parser.add_argument("--bug", help=f"run one bug (or {CONTROL!r}) and print its column")
    parser.add_argument("--jobs", type=int, default=2, help="processes at a time (default 2)")
    parser.add_argument("--save", metavar="JSON", help="also write the computed cells to JSON")
    parser.add_argument("--load", metavar="JSON", help="render saved cells instead of computing")
    args = parser.parse_args(argv)
    if args.bug:
        print(json.dumps(run_bug(args.bug), indent=1))
        return 0
    if args.load:
        saved = json.loads(Path(args.load).read_text(encoding="utf-8"))
        computed = {(layer, name): bool(found) for layer, name, found in saved}
    else:
        computed = compute(args.jobs)
    if args.save:
        cells_found = [[layer, name, found] for (layer, name), found in computed.items()]
        Path(args.save).write_text(json.dumps(cells_found), encoding="utf-8")
    page = render(computed)
    if args.write:
        Path(args.write).write_text(page + "\n", encoding="utf-8")
    else:
        print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
