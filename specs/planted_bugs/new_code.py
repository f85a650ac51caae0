"""Planted bugs in the newer code: the vLLM plugin and adapter, the trace level, the pool, the undo.

The catalogue of ``docs/new-code-bug-matrix.md`` (:mod:`specs.new_code_matrix`). Each bug is one
hunk of the real source changed (``old``, found exactly once in the module's file, becomes
``new``), as the plugin machine's planted bugs are (``tests/vllm/test_plugin_machine.py``,
``PluginSource``): :func:`planted` compiles the module's source with the change, under the
module's own file name, takes from it the code of the one function the hunk lies in, and
swaps that code into the function object itself for the length of the run (``__code__``).
Every caller reaches the change, those that imported the function by name included (the queue
imports the undo's helpers so, the checkers import ``has_links`` so), the function keeps its
globals, defaults and closure, and the rest of the module, classes and all, is the module as
imported. A function is swapped back when the run ends.

So a bug here is a copy of one function with one change, exactly as the other catalogues' copies
are, without a second copy of the function's text to keep in step: the hunk is checked against
the source each time it is planted (``old`` must occur once, inside the function named), so a
change of the production code that moves the hunk stops the run instead of planting nothing.

Code is swapped in the running process: a module loaded again from its file (``importlib.reload``
of the plugin, which the plugin's own tests and machine do) gets the production code back.
:func:`plugin_change` therefore gives the plugin machine its bug as the machine's own
``PluginSource`` change, which it applies to every copy of the plugin it loads.

Only the pure-Python build has code to swap: :func:`planted` refuses a compiled module.
"""

from __future__ import annotations

import dis
import importlib
import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import CodeType, FunctionType
from typing import Any

__all__ = [
    "AREAS",
    "NEW_CODE_CATALOGUE",
    "NEW_CODE_GAPS",
    "SourceBug",
    "code_of",
    "plant",
    "planted",
    "plugin_change",
]

#: The parts of the newer code, with the file each bug of the part is planted in.
AREAS: dict[str, str] = {
    "plugin": "`verified_queue/vllm/plugin.py`: what the plugin rebinds, and when",
    "adapter": "`verified_queue/vllm/checked.py`: vLLM's counter, offset by outside writes",
    "pool queue": "`verified_queue/vllm/checked.py`: the one-pass path of a pool's queue",
    "trace": "`verified_queue/traced.py`, `_trace_records.py`: the records and their lines",
    "pool": "`verified_queue/kvcache/pool.py`: which pool owns a block, through its weak reference",
    "undo": "`verified_queue/_undo.py`: the undo of a batch cut short",
    "links": "`verified_queue/_messages.py`: `has_links`, the one test of 'has both links'",
}


@dataclass(frozen=True)
class SourceBug:
    """One hunk of ``module``'s source changed, inside the function ``function``.

    ``function`` is the dotted path of the function object in the module (a method is
    ``Class.method``; a property's accessor ``Class.name.fget`` or ``.fset``). ``what`` says
    what goes wrong, for the page.
    """

    area: str
    module: str
    function: str
    old: str
    new: str
    what: str


def _target(bug: SourceBug) -> FunctionType:
    """The function object the bug's hunk lies in."""
    value: Any = importlib.import_module(bug.module)
    for part in bug.function.split("."):
        value = vars(value)[part] if isinstance(value, type) else getattr(value, part)
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if not isinstance(value, FunctionType):
        raise TypeError(f"{bug.module}.{bug.function} is no Python function: a compiled build?")
    return value


def _codes(code: CodeType) -> Iterator[CodeType]:
    yield code
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            yield from _codes(constant)


def _last_line(code: CodeType) -> int:
    return max(line for code in _codes(code) for _, line in dis.findlinestarts(code) if line)


def code_of(bug: SourceBug) -> tuple[FunctionType, CodeType]:
    """The function the bug changes, and its code with the hunk changed.

    Raises ``LookupError`` unless ``old`` occurs exactly once in the module's file, and lies
    inside the function (between its first line and its last).
    """
    module = importlib.import_module(bug.module)
    filename = module.__file__
    if filename is None or not filename.endswith(".py"):
        raise LookupError(f"{bug.module} is compiled: no source to plant {bug.function} in")
    source = inspect.getsource(module)
    if source.count(bug.old) != 1:
        raise LookupError(
            f"{bug.module}: the hunk occurs {source.count(bug.old)} times: {bug.old!r}"
        )
    function = _target(bug)
    original = function.__code__
    line = source[: source.index(bug.old)].count("\n") + 1
    if not original.co_firstlineno <= line <= _last_line(original):
        raise LookupError(f"{bug.module}: the hunk at line {line} is not in {bug.function}")
    changed = compile(source.replace(bug.old, bug.new), filename, "exec", dont_inherit=True)
    found = [
        code
        for code in _codes(changed)
        if code.co_name == original.co_name and code.co_firstlineno == original.co_firstlineno
    ]
    if len(found) != 1 or found[0].co_freevars != original.co_freevars:
        raise LookupError(f"{bug.module}: no single changed code for {bug.function}")
    if all(
        getattr(found[0], field) == getattr(original, field)
        for field in ("co_code", "co_consts", "co_names")
    ):
        raise LookupError(f"{bug.module}: the hunk changes nothing in {bug.function}")
    return function, found[0]


@contextmanager
def planted(bug: SourceBug | None) -> Iterator[None]:
    """The bug's function runs its changed code for the length of the block (``None``: none)."""
    if bug is None:
        yield
        return
    function, changed = code_of(bug)
    original = function.__code__
    function.__code__ = changed
    try:
        yield
    finally:
        function.__code__ = original


def plant(bug: SourceBug) -> None:
    """Plant ``bug`` for good: for a process that runs one bug and ends (the matrix's child)."""
    function, changed = code_of(bug)
    function.__code__ = changed


def plugin_change(bug: SourceBug) -> tuple[str, str] | None:
    """The plugin machine's ``PluginSource`` change for a plugin bug; ``None`` for the others."""
    return (bug.old, bug.new) if bug.module == "verified_queue.vllm.plugin" else None


_PLUGIN = "verified_queue.vllm.plugin"
_ADAPTER = "verified_queue.vllm.checked"
_TRACED = "verified_queue.traced"
_RECORDS = "verified_queue._trace_records"
_POOL = "verified_queue.kvcache.pool"
_UNDO = "verified_queue._undo"
_MESSAGES = "verified_queue._messages"

#: Every planted bug of the newer code by name, grouped by area.
NEW_CODE_CATALOGUE: dict[str, SourceBug] = {
    # -- the plugin (the first three are hunks of the plugin machine's own planted bugs)
    "plugin_forgets_kv_cache_utils_executed_again": SourceBug(
        "plugin",
        _PLUGIN,
        "_RebindingLoader.exec_module",
        "        self._loader.exec_module(module)\n        self._installation.rebind(module)\n",
        "        self._loader.exec_module(module)\n",
        "a reload of `kv_cache_utils` while installed brings vLLM's queue back",
    ),
    "plugin_uninstall_leaves_the_finder": SourceBug(
        "plugin",
        _PLUGIN,
        "uninstall",
        "for finder in sys.meta_path if not _is_plugin_finder(finder)]",
        "for finder in sys.meta_path if True or not _is_plugin_finder(finder)]",
        "`uninstall` leaves the plugin's finder in `sys.meta_path`: the process still counts "
        "as installed",
    ),
    "plugin_takes_an_unknown_value_for_production": SourceBug(
        "plugin",
        _PLUGIN,
        "read_mode",
        "    mode = MODES.get(value.strip().lower())\n",
        '    mode = MODES.get(value.strip().lower(), "production")\n',
        "a misspelt `VERIFIED_QUEUE_VLLM` installs the production queue instead of being refused",
    ),
    "plugin_imports_vllm_before_reading_the_mode": SourceBug(
        "plugin",
        _PLUGIN,
        "register",
        '    mode = read_mode()\n    if mode == "off":\n        return\n'
        '    vllm = importlib.import_module("vllm")\n',
        '    vllm = importlib.import_module("vllm")\n'
        '    mode = read_mode()\n    if mode == "off":\n        return\n',
        "`register` imports vLLM before it reads the variable: off, or a bad value, imports vLLM "
        "in every process",
    ),
    # -- vLLM's counter in check mode
    "adapter_accepts_a_negative_count": SourceBug(
        "adapter",
        _ADAPTER,
        "VllmCheckedFreeBlockQueue.num_free_blocks.fset",
        "        if value.__class__ is not int or value < 0:\n",
        "        if value.__class__ is not int:\n",
        "an outside write of a negative count is taken as an offset instead of refused",
    ),
    "adapter_takes_outside_writes_for_its_own": SourceBug(
        "adapter",
        _ADAPTER,
        "VllmCheckedFreeBlockQueue.num_free_blocks.fset",
        "_PRODUCTION_GLOBALS or _caller_is_own(2):\n",
        "_PRODUCTION_GLOBALS or _caller_is_own(1):\n",
        "the writer is looked for one frame too close (the setter itself): every outside write "
        "sets the true count, which check mode then reports as damage",
    ),
    "adapter_reads_skip_the_offset": SourceBug(
        "adapter",
        _ADAPTER,
        "VllmCheckedFreeBlockQueue.num_free_blocks.fget",
        "        if offset == 0 or _caller_is_own(2):",
        "        if offset == 0 or _caller_is_own(1):",
        "the reader is looked for one frame too close (the getter itself): vLLM reads the true "
        "count, never the count it wrote",
    ),
    # -- the one-pass path of a pool's queue (docs/vllm.md, "Membership from the pool")
    "pool_queue_fast_path_takes_a_held_block": SourceBug(
        "pool queue",
        _ADAPTER,
        "VllmCheckedFreeBlockQueue.popleft_n",
        "                        node.prev_free_block is not previous\n"
        "                        or node.ref_cnt != 0\n",
        "                        node.prev_free_block is not previous\n",
        "the one-pass test of `popleft_n` forgets P2: a held block leaves the queue unreported",
    ),
    "pool_queue_fast_path_skips_the_prefix_cache": SourceBug(
        "pool queue",
        _ADAPTER,
        "_may_join",
        "            if block.block_hash is not None:  # read again below, as in popleft_n\n"
        "                cache = _cache_of(link) if cache is None else cache\n"
        "                if not cache.contain(block.block_hash, block.block_id):\n"
        "                    return False\n",
        "",
        "the one-pass test of `append` and `append_n` forgets P3: a block whose hash is not "
        "cached joins",
    ),
    "pool_queue_fast_path_lets_the_null_block_join": SourceBug(
        "pool queue",
        _ADAPTER,
        "VllmCheckedFreeBlockQueue.prepend_n",
        "                        if block.ref_cnt != 0 or block.is_null"
        " or block.pool is not link:\n",
        "                        if block.ref_cnt != 0 or block.pool is not link:\n",
        "the one-pass test of `prepend_n` forgets P1: the null block joins the free queue",
    ),
    "pool_queue_fast_path_removes_a_held_block": SourceBug(
        "pool queue",
        _ADAPTER,
        "_removal_count",
        "            block.pool is not link\n            or block.ref_cnt != 0\n",
        "            block.pool is not link\n",
        "the one-pass test of `remove` forgets P2: a held block is taken out of the queue",
    ),
    "pool_queue_fast_path_keeps_the_pools_countdown": SourceBug(
        "pool queue",
        _ADAPTER,
        "VllmCheckedFreeBlockQueue.popleft_n",
        "        until_pool[0] -= 1\n        try:\n",
        "        try:\n",
        "an unlink from the front on the one-pass path does not count toward the next full "
        "check of the pool and the queue, which then comes late",
    ),
    "pool_queue_fast_path_trusts_the_count_to_the_tail": SourceBug(
        "pool queue",
        _ADAPTER,
        "VllmCheckedFreeBlockQueue.popleft_n",
        "                        may_leave = n == count and node.next_free_block is None\n",
        "                        may_leave = node.next_free_block is None\n",
        "the one-pass test of `popleft_n` reaches the tail without comparing the run with the "
        "count: a count raised above the chain is not reported",
    ),
    "pool_queue_full_check_leaves_out_the_queue": SourceBug(
        "pool queue",
        _ADAPTER,
        "check_pool_now",
        "            queue.full_check()\n",
        "",
        "the pool's full check no longer runs the queue's, which has no countdown of its own on "
        "a pool's queue: damage to the chain only the full check sees is never reported",
    ),
    "pool_queue_fast_path_prepends_to_an_empty_chain_miscounted": SourceBug(
        "pool queue",
        _ADAPTER,
        "VllmCheckedFreeBlockQueue.prepend_n",
        "                    and (count == 0 if after is tail else after.pool is link)\n",
        "                    and (after is tail or after.pool is link)\n",
        "the one-pass test of `prepend_n` takes an empty chain without its count: a count "
        "raised above an empty chain is carried on, unreported",
    ),
    # -- the trace level
    "trace_history_ignores_weak_holders": SourceBug(
        "trace",
        _RECORDS,
        "Records.history_of",
        "        elif holder is not block and not "
        "(type(holder) is weakref.ref and holder() is block):",
        "        elif holder is not block:",
        "a departed block held by a weak reference has no history: its record is taken for "
        "another block's",
    ),
    "trace_taken_since_compared_backwards": SourceBug(
        "trace",
        _TRACED,
        "TracedFreeBlockQueue._block_lines",
        "(freed is None or taken.number > freed.number):",
        "(freed is None or taken.number < freed.number):",
        "a double free's 'taken since by' line compares the two operations' numbers the wrong "
        "way round",
    ),
    "trace_departed_dropped_one_early": SourceBug(
        "trace",
        _TRACED,
        "TracedFreeBlockQueue._unlinked",
        "                if len(held) > HELD_DEPARTED:",
        "                if len(held) >= HELD_DEPARTED:",
        "one departed block without weak references fewer than the bound keeps its record",
    ),
    "trace_production_writes_noted_as_outside": SourceBug(
        "trace",
        _TRACED,
        "TracedFreeBlockQueue.__setattr__",
        "            if sys._getframe(1).f_code.co_filename != _PRODUCTION_FILE:",
        "            if sys._getframe(2).f_code.co_filename != _PRODUCTION_FILE:",
        "the count's writer is looked for one frame too far out: the production queue's own "
        "writes are noted as writes from outside",
    ),
    # -- which pool owns a block
    "pool_routes_by_a_strong_reference": SourceBug(
        "pool",
        _POOL,
        "BlockPool.free_blocks",
        "            owner = reference() if isinstance(reference, weakref.ref) else None\n",
        "            owner = reference if isinstance(reference, BlockPool) else None\n",
        "another pool's block is routed as if `pool` were the pool itself (0.33.0's strong "
        "reference), not a weak reference: every such block is taken for one of a pool that is "
        "gone, and skipped",
    ),
    "pool_owns_one_id_too_many": SourceBug(
        "pool",
        _POOL,
        "BlockPool.owns",
        "            and 0 <= block_id < self.num_blocks\n",
        "            and 0 <= block_id <= self.num_blocks\n",
        "`owns` of a block whose id is this pool's size (a block of a larger pool) indexes past "
        "the pool's blocks and raises `IndexError`",
    ),
    "pool_owns_trusts_the_weak_reference": SourceBug(
        "pool",
        _POOL,
        "BlockPool.owns",
        "            and 0 <= block_id < self.num_blocks\n"
        "            and self.blocks[block_id] is block\n",
        "",
        "`owns` takes any block whose `pool` is this pool's weak reference for its own, "
        "a stranger made with `weakref.ref(pool)` included",
    ),
    "pool_free_plans_by_the_reference_only": SourceBug(
        "pool",
        _POOL,
        "BlockPool._plan_free",
        "            if not self.owns(block):\n                raise BlockPoolError(\n"
        '                    f"free_blocks({block!r}): the block names a pool that does not own it',
        "            if block.pool is not self._weak_self:\n                raise BlockPoolError(\n"
        '                    f"free_blocks({block!r}): the block names a pool that does not own it',
        "a free checks only that a block names this pool's weak reference, not that the pool "
        "owns it",
    ),
    # -- the undo of a batch cut short
    "undo_finish_unstage_expects_staging_everywhere": SourceBug(
        "undo",
        _UNDO,
        "finish_unstage",
        "                        expected: object = "
        "staging if linked == 0 else batch[linked - 1]\n",
        "                        expected: object = staging\n",
        "the restartable undo finds only the first staged block (it expects each to name the "
        "staging tail): the rest stay staged",
    ),
    "undo_relink_forgets_the_successor_read_before": SourceBug(
        "undo",
        _UNDO,
        "relink_taken",
        "                    if successor is None:\n"
        "                        successor = following\n",
        "",
        "the undo of an interrupted `popleft_n` takes the last taken block's forward link for "
        "its successor even once the walk cleared it: the relinked run ends in `None`, cut from "
        "the rest",
    ),
    "undo_means_not_a_block_reads_past_the_batch": SourceBug(
        "undo",
        _UNDO,
        "means_not_a_block",
        "    return reached < len(batch) and lookup_error(batch[reached]) is type(error)",
        "    return reached <= len(batch) and lookup_error(batch[reached]) is type(error)",
        "an interrupt after the whole batch was staged makes the undo index past the batch: "
        "`IndexError` instead of the interrupt",
    ),
    # -- has both links
    "links_has_links_lets_a_lookup_error_out": SourceBug(
        "links",
        _MESSAGES,
        "has_links",
        "    except Exception:  "
        "# a proxy whose lookup raises (KeyError, say) has no links we can use\n",
        "    except AttributeError:  # a proxy whose lookup raises has no links we can use\n",
        "a proxy whose link lookup raises `KeyError` makes the test raise, not answer `False`",
    ),
}

#: Bugs planted and run as the catalogue's are, which fewer than three layers catch: the gaps.
#: The page shows them apart; the matrix's test requires each to stay a gap (a layer that
#: starts catching one moves it to the catalogue).
NEW_CODE_GAPS: dict[str, SourceBug] = {
    "plugin_recognises_vllms_queue_by_name": SourceBug(
        "plugin",
        _PLUGIN,
        "_Installation.rebind",
        "            and current.__module__ == KV_CACHE_UTILS\n",
        "",
        "a vLLM module's own class named `FreeKVCacheBlockQueue` is rebound too",
    ),
    "links_has_links_reads_prev_only": SourceBug(
        "links",
        _MESSAGES,
        "has_links",
        "        return hasattr(value, _PREV) and hasattr(value, _NEXT)\n",
        "        return hasattr(value, _PREV)\n",
        "an object with `prev_free_block` alone counts as having both links",
    ),
    "undo_unstage_clears_the_back_link_first": SourceBug(
        "undo",
        _UNDO,
        "unstage",
        "        block.next_free_block = block.prev_free_block = None\n",
        "        block.prev_free_block = block.next_free_block = None\n",
        "the fast undo clears each block's back link before its forward link: cut between the "
        "two, it leaves a block the restartable undo cannot find",
    ),
}
