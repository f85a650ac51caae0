"""The vLLM plugin as a process meets it: a state machine over what a process does, against a model.

The rules are what a process running vLLM (or vLLM's tests) can do: import vLLM's modules
(``kv_cache_utils``, ``block_pool``, a KV-cache manager that binds the block, a module that
binds the queue, one that defines classes of those names itself, and ``vllm_outside``, which is
not vLLM's), reload any loaded one, set or unset ``VERIFIED_QUEUE_VLLM`` (every mode, off,
spellings, bad values), call ``register`` or ``install`` (any mode, any number of times) and
``uninstall``, reload the plugin's module or load a second copy of it and call those from it,
and build vLLM's ``BlockPool``. After every step the invariant compares each binding of
``FreeKVCacheBlockQueue`` and ``KVCacheBlock`` in each loaded module with the model
(``tests/vllm/plugin_model.py``): vLLM's class of the right execution of ``kv_cache_utils``,
the mode's queue, the block derived at install, or the module's own class; and it compares
``verified_queue.status()``, ``installed_mode()`` of every copy of the plugin, the plugin's
finders in ``sys.meta_path`` (one while installed, else none), and the lines logged. Each
refusal must be the documented one: ``VllmPluginError`` in one line, nothing rebound, and for
off or a bad value nothing of vLLM imported.

The process runs on stand-in ``vllm`` packages written to a temporary directory, shaped as
0.33.0's and 0.34.0's ``kv_cache_utils`` and ``block_pool`` are as far as the plugin looks
(0.33.0: a strong ``pool`` reference and a private ``_block_hash`` behind a property; 0.34.0: a
weak reference and plain hash fields), on six shapes the plugin must refuse (or, for the
unslotted block, refuse on the compiled build only), and, with ``VERIFIED_QUEUE_VLLM_WHEEL`` set
(``VERIFIED_QUEUE_VLLM_WHEEL=.tox/vllm-wheel pytest tests/vllm/test_plugin_machine.py``), on
vLLM's own two files of each pinned wheel, their other imports stubbed by files written beside
them. Every ``kv_cache_utils`` ends with one line the test adds: it hands
the classes each execution made to the test, which is how the model tells vLLM's classes of
two executions apart.

Each run is tried with vLLM's own block (the pure build) and with the block derived at install
(the compiled build; on the pure build it is forced through ``verified_queue.COMPILED``, which
is all the plugin reads). The layer can fail: each planted bug is one hunk changed in
``plugin.py``'s source, loaded as a module of its own, and the machine must find it.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import logging
import os
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import verified_queue
from conformance.wheel import BLOCK_POOL as WHEEL_BLOCK_POOL
from conformance.wheel import KV_CACHE_UTILS as WHEEL_KV_CACHE_UTILS
from conformance.wheel import read_member, wheel_version
from tests.vllm.plugin_model import (
    ANOTHER_MODE,
    BLOCK,
    BLOCK_POOL,
    KV_CACHE_UTILS,
    QUEUE,
    UNRECOGNISED,
    VALUES,
    Binding,
    Derived,
    ModuleShape,
    Ours,
    ProcessModel,
    Vllms,
)
from verified_queue import Block
from verified_queue._status import is_plugin_finder
from verified_queue.queue import FreeBlockQueue
from verified_queue.vllm import plugin
from verified_queue.vllm.checked import VllmCheckedFreeBlockQueue
from verified_queue.vllm.traced import VllmTracedFreeBlockQueue

VARIABLE = plugin.ENVIRONMENT_VARIABLE
#: The queue each mode installs.
QUEUES: dict[str, type] = {
    "production": FreeBlockQueue,
    "checked": VllmCheckedFreeBlockQueue,
    "trace": VllmTracedFreeBlockQueue,
}
#: The test's own modules in the temporary directory: the classes each execution of
#: kv_cache_utils made, and a module that is not vLLM's though its name starts with "vllm".
BIRTHS = "vq_plugin_machine_births"
OUTSIDE = "vllm_outside"
#: The names the test gives the plugin's copies and planted-bug modules in sys.modules.
COPY_PREFIX = "vq_plugin_machine_plugin_"
KV_CACHE_MANAGER = "vllm.v1.core.kv_cache_manager"
OTHER = "vllm.v1.other"
OWN_CLASSES = "vllm.v1.own_classes"

# ---------------------------------------------------------------------------
# The stand-in layouts: each file as the plugin sees it, nothing more.

#: The last line of every kv_cache_utils the test writes: hand over the classes just made.
BIRTH_LINE = f"\n__import__({BIRTHS!r}).born.append((FreeKVCacheBlockQueue, KVCacheBlock))\n"

BLOCK_0_34 = '''
import weakref
from dataclasses import dataclass, field


@dataclass(slots=True)
class KVCacheBlock:
    """0.34.0's shape: a weak reference to the pool, plain hash fields."""

    block_id: int
    ref_cnt: int = 0
    pool: "weakref.ref[object] | None" = field(
        default=None, repr=False, compare=False, kw_only=True
    )
    block_hash: "bytes | None" = None
    block_hash_num_tokens: "int | None" = None
    prev_free_block: "KVCacheBlock | None" = None
    next_free_block: "KVCacheBlock | None" = None
    is_null: bool = False

    def reset_hash(self):
        self.block_hash = None
        self.block_hash_num_tokens = None
'''

BLOCK_0_33 = '''
from dataclasses import dataclass, field


@dataclass(slots=True)
class KVCacheBlock:
    """0.33.0's shape: a strong reference to the pool, the hash private behind a property."""

    block_id: int
    ref_cnt: int = 0
    pool: "BlockPool | None" = field(default=None, repr=False, compare=False, kw_only=True)
    _block_hash: "bytes | None" = None
    _block_hash_num_tokens: "int | None" = None
    prev_free_block: "KVCacheBlock | None" = None
    next_free_block: "KVCacheBlock | None" = None
    is_null: bool = False

    @property
    def block_hash(self):
        return self._block_hash

    def reset_hash(self):
        self._block_hash = None
        self._block_hash_num_tokens = None
'''

QUEUE_SOURCE = '''

class FreeKVCacheBlockQueue:
    """vLLM's queue as far as the plugin looks: built from the blocks, seven methods."""

    def __init__(self, blocks):
        self.blocks = list(blocks)

    def popleft(self):
        return self.blocks.pop(0)

    def popleft_n(self, n):
        return [self.popleft() for _ in range(n)]

    def remove(self, block):
        self.blocks.remove(block)

    def append(self, block):
        self.blocks.append(block)

    def append_n(self, blocks):
        self.blocks.extend(blocks)

    def prepend_n(self, blocks):
        self.blocks[:0] = blocks

    def get_all_free_blocks(self):
        return list(self.blocks)
'''

POOL_SOURCE = """
{imports}from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue, KVCacheBlock


class BlockPool:
    def __init__(self, num_gpu_blocks, enable_caching, hash_block_size):
        self.blocks = [KVCacheBlock(i, pool={pool}) for i in range(num_gpu_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        self.null_block = self.free_block_queue.popleft()
        self.null_block.is_null = True
"""

OWN_CLASSES_SOURCE = '''
"""A vLLM module with classes of the two names of its own: the plugin must leave them."""

from dataclasses import dataclass


@dataclass(slots=True)
class KVCacheBlock:
    block_id: int
    ref_cnt: int = 0
    pool: object = None
    prev_free_block: "KVCacheBlock | None" = None
    next_free_block: "KVCacheBlock | None" = None
    is_null: bool = False
''' + QUEUE_SOURCE.replace("vLLM's queue", "A queue of its own")

#: The files every layout shares: the test's modules and the users of the two names.
COMMON_FILES = {
    "vllm/logger.py": "import logging\n\ninit_logger = logging.getLogger\n",
    "vllm/v1/__init__.py": "",
    "vllm/v1/core/__init__.py": "",
    "vllm/v1/core/kv_cache_manager.py": (
        "from vllm.v1.core.block_pool import BlockPool\n"
        "from vllm.v1.core.kv_cache_utils import KVCacheBlock\n"
    ),
    "vllm/v1/other.py": "from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue\n",
    "vllm/v1/own_classes.py": OWN_CLASSES_SOURCE,
    f"{OUTSIDE}.py": (
        "from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue, KVCacheBlock\n"
    ),
    f"{BIRTHS}.py": "born = []\n",
}

#: The modules of each layout and what each binds (the model's view of the files above).
SHAPES = (
    ModuleShape(KV_CACHE_UTILS, vllms=True),
    ModuleShape(BLOCK_POOL, imports=(KV_CACHE_UTILS,), from_utils=(QUEUE, BLOCK)),
    ModuleShape(KV_CACHE_MANAGER, imports=(BLOCK_POOL, KV_CACHE_UTILS), from_utils=(BLOCK,)),
    ModuleShape(OTHER, imports=(KV_CACHE_UTILS,), from_utils=(QUEUE,)),
    ModuleShape(OWN_CLASSES, defines=(QUEUE, BLOCK)),
    ModuleShape(OUTSIDE, imports=(KV_CACHE_UTILS,), from_utils=(QUEUE, BLOCK)),
)
MODULE_NAMES = tuple(shape.name for shape in SHAPES)


@dataclass(frozen=True)
class Layout:
    """One ``vllm`` package on disk: where, which version it says, whether the plugin takes it."""

    name: str
    root: Path
    version: str
    shapes: tuple[ModuleShape, ...] = SHAPES
    #: Whether the plugin recognises it with vLLM's own block (pure) and with a derived block.
    recognised: bool = True
    derivable: bool = True

    def recognised_with(self, derived: bool) -> bool:
        """Whether ``install`` must take it, blocks derived or not."""
        return self.recognised and (self.derivable or not derived)


def write_files(root: Path, files: dict[str, str]) -> None:
    """Write ``files`` (path -> text) under ``root``."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def stand_in_files(version: str) -> dict[str, str]:
    """The stand-in vLLM of ``version`` ("0.33.0" or "0.34.0")."""
    block, imports, pool = (
        (BLOCK_0_34, "import weakref\n\n", "weakref.ref(self)")
        if version == "0.34.0"
        else (BLOCK_0_33, "", "self")
    )
    return {
        **COMMON_FILES,
        "vllm/__init__.py": f"__version__ = {version!r}\n",
        "vllm/v1/core/kv_cache_utils.py": block + QUEUE_SOURCE + BIRTH_LINE,
        "vllm/v1/core/block_pool.py": POOL_SOURCE.format(imports=imports, pool=pool),
    }


def stand_in_layout(root: Path, version: str) -> Layout:
    """Write the stand-in of ``version`` under ``root``."""
    write_files(root, stand_in_files(version))
    return Layout(version, root, version)


#: Shapes the plugin must not take, on 0.34.0's stand-in: (name, file, old text, new text).
UNRECOGNISED_CHANGES = (
    (
        "no prepend_n",
        "kv_cache_utils",
        "def prepend_n(self, blocks):",
        "def prepend(self, blocks):",
    ),
    (
        "a queue of more arguments",
        "kv_cache_utils",
        "def __init__(self, blocks):",
        "def __init__(self, blocks, size=None):",
    ),
    ("no ref_cnt", "kv_cache_utils", "    ref_cnt: int = 0\n", ""),
    ("no dataclass", "kv_cache_utils", "@dataclass(slots=True)\n", ""),
    ("block_pool without the block", "block_pool", ", KVCacheBlock\n", "\n"),
    ("an unslotted block", "kv_cache_utils", "@dataclass(slots=True)\n", "@dataclass\n"),
)


def unrecognised_layouts(root: Path) -> tuple[Layout, ...]:
    """Write each shape of :data:`UNRECOGNISED_CHANGES` under ``root``, as vLLM 0.99.0."""
    layouts = []
    for name, file, old, new in UNRECOGNISED_CHANGES:
        files = {**stand_in_files("0.34.0"), "vllm/__init__.py": '__version__ = "0.99.0"\n'}
        path = f"vllm/v1/core/{file}.py"
        assert files[path].count(old) == 1, (name, old)
        files[path] = files[path].replace(old, new)
        write_files(root / name.replace(" ", "-"), files)
        shapes: tuple[ModuleShape, ...] = SHAPES
        if file == "block_pool":
            pool = ModuleShape(BLOCK_POOL, imports=(KV_CACHE_UTILS,), from_utils=(QUEUE,))
            shapes = tuple(pool if shape.name == BLOCK_POOL else shape for shape in SHAPES)
        unslotted = name == "an unslotted block"
        layouts.append(
            Layout(
                name,
                root / name.replace(" ", "-"),
                "0.99.0",
                shapes,
                recognised=unslotted,
                derivable=not unslotted,
            )
        )
    return tuple(layouts)


# vLLM's own files: the two of the wheel, their other imports stubbed by files beside them.

#: A stubbed module: any name it is asked for is a class of that name, which nothing calls.
STUB = '''"""A stub the test wrote: vLLM's {name}, as far as its core's two files use it."""


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    made = type(name, (), {{}})
    globals()[name] = made
    return made
'''
#: What vLLM's two files call of their stubbed imports, to import and to build a BlockPool.
STUBBED_VALUES = {
    "vllm.envs": "VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES = False\n",
    "vllm.utils.math_utils": "def cdiv(a, b):\n    return -(a // -b)\n",
    "vllm.utils.gc_utils": "def gc_untrack(value):\n    return value\n",
    "vllm.distributed.kv_events": 'MEDIUM_GPU = "GPU"\n',
}


def imported_modules(source: str) -> set[str]:
    """The ``vllm`` modules ``source`` imports (``from vllm import envs``: ``vllm.envs``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "vllm":
                found.update(f"vllm.{alias.name}" for alias in node.names)
            elif node.module.startswith("vllm."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("vllm."))
    return found


def wheel_layout(root: Path, wheel: Path) -> Layout:
    """vLLM's ``kv_cache_utils.py`` and ``block_pool.py`` of ``wheel`` under ``root``, stubbed."""
    version = wheel_version(wheel)
    utils = read_member(wheel, WHEEL_KV_CACHE_UTILS)
    pool = read_member(wheel, WHEEL_BLOCK_POOL)
    files = {
        **COMMON_FILES,
        "vllm/__init__.py": f"__version__ = {version!r}\n",
        WHEEL_KV_CACHE_UTILS: utils + BIRTH_LINE,
        WHEEL_BLOCK_POOL: pool,
    }
    written = {path[: -len(".py")].replace("/", ".").removesuffix(".__init__") for path in files}
    needed = imported_modules(utils) | imported_modules(pool)
    for name in list(needed):  # their packages too
        parts = name.split(".")
        needed |= {".".join(parts[:end]) for end in range(2, len(parts))}
    for name in sorted(needed - written):
        package = any(other.startswith(f"{name}.") for other in needed)
        path = name.replace(".", "/") + ("/__init__.py" if package else ".py")
        text = STUB.format(name=name) + STUBBED_VALUES.get(name, "")
        files[path] = "" if package else text
    write_files(root, files)
    return Layout(f"vLLM {version}", root, version)


# ---------------------------------------------------------------------------
# The plugin under test: the installed module, or plugin.py with one hunk changed.


@dataclass(frozen=True)
class PluginSource:
    """How the machine loads the plugin, reloads it and loads a second copy.

    ``change``: ``None`` for the installed module itself (reloaded with
    ``importlib.reload``, and put back as it was after each example); else
    ``(old, new)``, one hunk of ``plugin.py``'s source changed, executed as a module of
    its own (a reload executes the changed source again in it, as ``importlib.reload``
    executes a module's source in its own namespace).
    """

    change: tuple[str, str] | None = None

    def source(self) -> str:
        """The plugin's source, with the change made (it must occur exactly once)."""
        text = Path(plugin.__file__).read_text(encoding="utf-8")
        if self.change is None:
            return text
        old, new = self.change
        if text.count(old) != 1:
            raise LookupError(f"the planted change's text occurs {text.count(old)} times: {old!r}")
        return text.replace(old, new)

    def load(self, name: str) -> types.ModuleType:
        """A new module ``name`` of the (changed) source, put in ``sys.modules`` as imports do."""
        spec = importlib.util.spec_from_loader(name, loader=None, origin=plugin.__file__)
        if spec is None:  # pragma: no cover -- spec_from_loader makes one for a name
            raise ImportError(name)
        module = importlib.util.module_from_spec(spec)
        module.__file__ = plugin.__file__
        sys.modules[name] = module
        self.execute(module)
        return module

    def execute(self, module: types.ModuleType) -> None:
        """Execute the (changed) source in ``module``'s namespace."""
        exec(compile(self.source(), plugin.__file__, "exec"), vars(module))

    def primary(self) -> types.ModuleType:
        """The plugin module the process starts with."""
        return plugin if self.change is None else self.load(f"{COPY_PREFIX}planted")

    def reload(self, module: types.ModuleType) -> types.ModuleType:
        """Load the plugin's module again, in place."""
        if self.change is None:
            return importlib.reload(module)
        self.execute(module)
        return module

    def copy(self, number: int) -> types.ModuleType:
        """A second copy of the plugin, under another name."""
        if self.change is None:
            name = f"{COPY_PREFIX}copy_{number}"
            spec = importlib.util.spec_from_file_location(name, plugin.__file__)
            if spec is None or spec.loader is None:  # pragma: no cover -- a .py file has one
                raise ImportError(name)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            return module
        return self.load(f"{COPY_PREFIX}copy_{number}")


def our_module(name: str) -> bool:
    """Whether a module of ``sys.modules`` is one a machine's example loaded."""
    return name in ("vllm", OUTSIDE, BIRTHS) or name.startswith(("vllm.", COPY_PREFIX))


def no_example_left() -> None:
    """Nothing of an example outlives it: no module, no finder, no variable (a test of its own)."""
    assert not [name for name in sys.modules if our_module(name)]
    assert not [finder for finder in sys.meta_path if is_plugin_finder(finder)]
    assert VARIABLE not in os.environ


class Records(logging.Handler):
    """The lines the plugin logs."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


# ---------------------------------------------------------------------------
# The machine.

#: ``VERIFIED_QUEUE_VLLM``: unset, off in three spellings, each mode, two bad values.
VALUES_SET = st.sampled_from(
    [None, "", " OFF ", "production", "Checked", "TRACE", "production", "checked", "yes", "prod"]
)


class PluginMachine(RuleBasedStateMachine):
    """A process with a stand-in (or vLLM's own) ``vllm`` on its path, and the model of it."""

    layouts: ClassVar[tuple[Layout, ...]]
    derived: ClassVar[bool]
    plugin_source: ClassVar[PluginSource] = PluginSource()

    def __init__(self) -> None:
        super().__init__()
        self.layout: Layout | None = None
        self.process: ProcessModel | None = None
        self.copies: list[types.ModuleType] = []
        self.loaded_copies = 0
        self.derived_classes: dict[int, type] = {}
        self.saved_plugin = dict(vars(plugin))
        self.saved_path = list(sys.path)
        self.saved_meta_path = list(sys.meta_path)
        self.saved_variable = os.environ.pop(VARIABLE, None)
        self.logger = logging.getLogger(plugin.LOGGER_NAME)
        self.saved_logger = (self.logger.level, self.logger.propagate)
        self.records = Records()
        self.logger.addHandler(self.records)
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False

    @property
    def model(self) -> ProcessModel:
        """The model (made by the first step, which chooses the layout)."""
        if self.process is None:  # pragma: no cover -- initialize runs first
            raise RuntimeError("no layout chosen yet")
        return self.process

    @initialize(data=st.data())
    def start(self, data: st.DataObject) -> None:
        """A new process: one of the layouts on the path, the plugin loaded, nothing of vLLM."""
        # Drawn by name: a failing example prints that, not the layout's fields.
        name = data.draw(st.sampled_from([layout.name for layout in self.layouts]), label="layout")
        (layout,) = [layout for layout in self.layouts if layout.name == name]
        self.layout = layout
        sys.path.insert(0, str(layout.root))
        importlib.invalidate_caches()
        sys.modules["vllm.v1.blocked"] = None  # type: ignore[assignment]  # an import refused
        self.copies = [self.plugin_source.primary()]
        self.process = ProcessModel(
            layout.shapes, derived=self.derived, recognised=layout.recognised_with(self.derived)
        )

    def teardown(self) -> None:
        """Leave the process as the example found it."""
        sys.meta_path[:] = self.saved_meta_path  # a planted bug may have left anything there
        for name in [name for name in sys.modules if our_module(name)]:
            del sys.modules[name]
        vars(plugin).clear()
        vars(plugin).update(self.saved_plugin)
        sys.path[:] = self.saved_path
        if self.layout is not None:
            sys.path_importer_cache.pop(str(self.layout.root), None)
        os.environ.pop(VARIABLE, None)
        if self.saved_variable is not None:  # pragma: no cover -- tests run with it unset
            os.environ[VARIABLE] = self.saved_variable
        self.logger.removeHandler(self.records)
        self.logger.setLevel(self.saved_logger[0])
        self.logger.propagate = self.saved_logger[1]

    # ------------------------------------------------------------------ helpers

    def copy(self, via: int) -> types.ModuleType:
        """One of the plugin's copies (the first: the one the process started with)."""
        return self.copies[via % len(self.copies)]

    def vllm_modules(self) -> set[str]:
        """The ``vllm`` modules loaded."""
        return {name for name in sys.modules if name == "vllm" or name.startswith("vllm.")}

    def expect(
        self,
        call: Callable[[], object],
        refusal: str | None,
        copy: types.ModuleType,
        wording: str,
    ) -> None:
        """``call`` must succeed, or be refused as the model says: one line holding ``wording``."""
        error: Exception | None = None
        try:
            call()
        except Exception as caught:  # compared with the model below
            error = caught
        if error is None:
            assert refusal is None, f"done, where the model says it must be refused ({refusal})"
            return
        if refusal is None:
            raise AssertionError(f"refused, where the model says it must succeed: {error!r}")
        assert isinstance(error, copy.VllmPluginError), error
        message = str(error)
        assert "\n" not in message, message
        assert wording in message, (refusal, wording, message)

    def wording(self, refusal: str | None, bad_value: str) -> str:
        """What the refusal's one line must hold."""
        if refusal == UNRECOGNISED and self.layout is not None:
            return f"vLLM {self.layout.version}: "
        if refusal == ANOTHER_MODE:
            return "already"
        return bad_value

    # ------------------------------------------------------------------ the process

    @rule(name=st.sampled_from(MODULE_NAMES))
    def import_a_module(self, name: str) -> None:
        """``import`` of one of the modules: executed unless loaded already."""
        importlib.import_module(name)
        self.model.import_module(name)

    @precondition(lambda self: bool(self.model.bound))
    @rule(data=st.data())
    def reload_a_module(self, data: st.DataObject) -> None:
        """``importlib.reload`` of a loaded module (vLLM's ``test_none_hash`` reloads one)."""
        name = data.draw(st.sampled_from(sorted(self.model.bound)), label="module")
        importlib.reload(sys.modules[name])
        self.model.execute(name)
        installed = "installed" if self.model.installation is not None else "not installed"
        event(f"reload {name.rpartition('.')[2]}, {installed}")

    @precondition(lambda self: self.model.loaded(KV_CACHE_UTILS))
    @rule()
    def reload_kv_cache_utils(self) -> None:
        """What vLLM's ``test_none_hash`` does, as a rule of its own: it matters most."""
        importlib.reload(sys.modules[KV_CACHE_UTILS])
        self.model.execute(KV_CACHE_UTILS)

    @rule(value=VALUES_SET)
    def set_the_variable(self, value: str | None) -> None:
        """``VERIFIED_QUEUE_VLLM`` set to a mode, off, a bad value, or unset."""
        if value is None:
            os.environ.pop(VARIABLE, None)
        else:
            os.environ[VARIABLE] = value
        self.model.environment = value

    @rule(via=st.integers(0, 2))
    def register(self, via: int) -> None:
        """vLLM's ``load_general_plugins()`` calling the entry point, of any copy of the plugin."""
        copy = self.copy(via)
        value = os.environ.get(VARIABLE, "")
        before = self.vllm_modules()
        installed = self.model.installation is not None
        refusal = self.model.register()
        reads = VALUES.get(value.strip().lower(), value)
        event(f"register {'again' if installed else 'first'} ({reads}): {refusal or 'done'}")
        self.expect(
            copy.register,
            refusal,
            copy,
            self.wording(refusal, f"{value!r}: expected off, production, checked or trace"),
        )
        if VALUES.get(value.strip().lower()) in (None, "off"):
            assert self.vllm_modules() == before, "off, or a bad value, imported vLLM"

    @rule(value=VALUES_SET, via=st.integers(0, 2))
    def start_vllm(self, value: str | None, via: int) -> None:
        """The variable set, then ``register``: what each process vLLM starts does."""
        self.set_the_variable(value)
        self.register(via)

    @precondition(lambda self: self.model.loaded(KV_CACHE_UTILS) and self.model.loaded(BLOCK_POOL))
    @rule(
        mode=st.sampled_from(["production", "checked", "trace", "off", "Production"]),
        via=st.integers(0, 2),
    )
    def install(self, mode: str, via: int) -> None:
        """``install`` called directly (as tests do), with a mode, or a value it must refuse."""
        copy = self.copy(via)
        installed = self.model.installation is not None
        refusal = self.model.install(mode)
        event(f"install {'again' if installed else 'first'}: {refusal or 'done'}")
        self.expect(
            lambda: copy.install(
                mode,
                sys.modules[KV_CACHE_UTILS],
                sys.modules[BLOCK_POOL],
                vllm_version=self.layout.version if self.layout is not None else "?",
            ),
            refusal,
            copy,
            self.wording(refusal, f"{VARIABLE}={mode!r}: expected production, checked or trace"),
        )

    @rule(via=st.integers(0, 2))
    def uninstall(self, via: int) -> None:
        """``uninstall``, from any copy of the plugin."""
        event(f"uninstall, {'installed' if self.model.installation is not None else 'nothing'}")
        self.copy(via).uninstall()
        self.model.uninstall()

    @rule()
    def reload_the_plugin(self) -> None:
        """``importlib.reload`` of the plugin's module: still one installation."""
        self.copies[0] = self.plugin_source.reload(self.copies[0])

    @precondition(lambda self: len(self.copies) < 3)
    @rule()
    def load_another_copy(self) -> None:
        """A second copy of the plugin's module, under another name."""
        self.loaded_copies += 1
        self.copies.append(self.plugin_source.copy(self.loaded_copies))

    @precondition(
        lambda self: (
            self.model.loaded(BLOCK_POOL)
            and self.layout is not None
            and self.layout.recognised_with(self.derived)
        )
    )
    @rule()
    def build_a_pool(self) -> None:
        """vLLM's ``BlockPool``: it builds the queue and the blocks ``block_pool`` binds."""
        try:
            pool = sys.modules[BLOCK_POOL].BlockPool(8, False, 16)
        except Exception as error:
            raise AssertionError(f"vLLM's BlockPool cannot be built: {error!r}") from error
        event(f"BlockPool built on {type(pool.free_block_queue).__name__}")
        bound, names = self.model.bound[BLOCK_POOL], vars(sys.modules[BLOCK_POOL])
        queue = self.expected(BLOCK_POOL, QUEUE, bound[QUEUE], names[QUEUE])
        block = self.expected(BLOCK_POOL, BLOCK, bound[BLOCK], names[BLOCK])
        assert type(pool.free_block_queue) is queue, f"a pool on {type(pool.free_block_queue)}"
        assert type(pool.blocks[0]) is block, f"a pool of {type(pool.blocks[0])}"

    # ------------------------------------------------------------------ what must hold

    def births(self) -> list[tuple[type, type]]:
        """The classes each execution of kv_cache_utils made, in order."""
        module = sys.modules.get(BIRTHS)
        return [] if module is None else list(module.born)

    def expected(self, module: str, name: str, binding: Binding, actual: object) -> object:
        """The class the model's ``binding`` stands for (``actual``: what is bound there)."""
        if isinstance(binding, Vllms):
            return self.births()[binding.generation - 1][0 if name == QUEUE else 1]
        if isinstance(binding, Ours):
            return QUEUES[self.model.installations[binding.installation].mode]
        if isinstance(binding, Derived):
            return self.derived_class(binding.installation, actual)
        own = actual if isinstance(actual, type) and actual.__module__ == module else None
        assert own is not None, f"{module}.{name} is {actual!r}, not its own class"
        assert not issubclass(own, (FreeBlockQueue, Block)), f"{module}.{name} was rebound"
        return own

    def derived_class(self, installation: int, actual: object) -> type:
        """The block installation ``installation`` derived; checked once, the first time seen."""
        if installation not in self.derived_classes:
            made_from = self.model.installations[installation].derived_from
            assert made_from is not None
            vllms = self.births()[made_from - 1][1]
            assert isinstance(actual, type), actual
            assert issubclass(actual, Block), actual
            assert vars(actual).get("__vllm_block__") is vllms, "derived from another block"
            assert (actual.__module__, actual.__qualname__) == (KV_CACHE_UTILS, BLOCK)
            names = [field.name for field in dataclasses.fields(vllms)]
            links = {"prev_free_block", "next_free_block"}
            derived: Any = actual  # a dataclass on Block, which typeshed cannot say
            assert [field.name for field in dataclasses.fields(derived)] == [
                name for name in names if name not in links
            ]
            self.derived_classes[installation] = actual
        return self.derived_classes[installation]

    def status_line(self, module: str, name: str, binding: Binding) -> str:
        """The line ``status()`` must give for a rebound name."""
        if isinstance(binding, Ours):
            queue = QUEUES[self.model.installations[binding.installation].mode]
            return f"{module}.{name} -> {queue.__module__}.{queue.__qualname__}"
        return f"{module}.{name} -> {KV_CACHE_UTILS}.{BLOCK}"

    @invariant()
    def every_binding_is_the_models(self) -> None:
        """Each name of each loaded module holds the class the model says."""
        if self.process is None or self.layout is None:
            return
        assert len(self.births()) == self.model.generations, "kv_cache_utils executed more or less"
        for shape in self.layout.shapes:
            module = sys.modules.get(shape.name)
            assert (module is not None) == self.model.loaded(shape.name), shape.name
            if module is None:
                continue
            for name, binding in self.model.bound[shape.name].items():
                actual = vars(module).get(name)
                wanted = self.expected(shape.name, name, binding, actual)
                assert actual is wanted, (
                    f"{shape.name}.{name} is {actual!r}, not {binding} ({wanted!r})"
                )

    @invariant()
    def one_finder_while_installed(self) -> None:
        """The plugin's finder: first in sys.meta_path while installed, and only one; else none."""
        finders = [finder for finder in sys.meta_path if is_plugin_finder(finder)]
        wanted = 0 if self.process is None or self.model.installation is None else 1
        assert len(finders) == wanted, f"sys.meta_path holds {len(finders)} finders of the plugin"
        if finders:
            assert sys.meta_path[0] is finders[0], "the plugin's finder is not first"

    @invariant()
    def the_status_is_the_models(self) -> None:
        """``status()``, ``installed_mode()`` of every copy, and the lines logged."""
        if self.process is None:
            return
        mode = self.model.mode()
        for copy in self.copies:
            said = copy.installed_mode()
            assert said == mode, f"{copy.__name__}.installed_mode() is {said!r}, not {mode!r}"
        found = verified_queue.status()
        assert found.vllm_mode == mode
        assert found.vllm_requested == (self.model.environment or "")
        lines = sorted({self.status_line(*rebound) for rebound in self.model.rebound()})
        assert list(found.vllm_rebound) == lines
        assert len(self.records.lines) == self.model.log_lines, self.records.lines


# ---------------------------------------------------------------------------
# Running it.

#: The default run: modest, so the file stays under a minute on 2 cores.
STAND_IN_SETTINGS = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
WHEEL_SETTINGS = settings(STAND_IN_SETTINGS, max_examples=25)
#: The planted bugs: the same examples on every run, none kept, the first failure enough.
PLANTED_SETTINGS = settings(
    max_examples=300,
    stateful_step_count=30,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)

BLOCKS = pytest.mark.parametrize("derived", [False, True], ids=["vLLM's block", "derived block"])


@pytest.fixture
def process(monkeypatch: pytest.MonkeyPatch, derived: bool) -> Iterator[None]:
    """A process with nothing of vLLM loaded; the block derived or not, as asked."""
    if any(name == "vllm" or name.startswith("vllm.") for name in sys.modules):
        pytest.skip("a real vllm is loaded in this process")
    if verified_queue.COMPILED and not derived:
        pytest.skip("the compiled queue takes Block subclasses only")
    monkeypatch.delenv(VARIABLE, raising=False)
    monkeypatch.setattr(verified_queue, "COMPILED", derived)
    yield
    no_example_left()


def machine(
    layouts: tuple[Layout, ...], derived: bool, source: PluginSource = PluginSource()
) -> type[PluginMachine]:
    """The machine over ``layouts``, the block derived or not, the plugin from ``source``."""
    namespace: dict[str, Any] = {"layouts": layouts, "derived": derived, "plugin_source": source}
    return type("Process", (PluginMachine,), namespace)


@pytest.mark.usefixtures("process")
@BLOCKS
@pytest.mark.parametrize("version", ["0.33.0", "0.34.0"])
def test_the_plugin_follows_the_model_on_a_stand_in_vllm(
    tmp_path: Path, version: str, derived: bool
) -> None:
    """On 0.33.0's and 0.34.0's layouts: every binding, the status and the finders as modelled."""
    layouts = (stand_in_layout(tmp_path, version),)
    run_state_machine_as_test(machine(layouts, derived), settings=STAND_IN_SETTINGS)


@pytest.mark.usefixtures("process")
@BLOCKS
def test_an_unrecognised_vllm_is_refused_with_nothing_rebound(
    tmp_path: Path, derived: bool
) -> None:
    """Six shapes the plugin must refuse (the unslotted block on the compiled build only)."""
    layouts = unrecognised_layouts(tmp_path)
    run_state_machine_as_test(machine(layouts, derived), settings=STAND_IN_SETTINGS)


@pytest.mark.usefixtures("process")
@BLOCKS
def test_the_plugin_follows_the_model_on_vllms_own_files(
    wheel: Path, tmp_path: Path, derived: bool
) -> None:
    """The same machine on vLLM's own kv_cache_utils.py and block_pool.py of each pinned wheel."""
    layouts = (wheel_layout(tmp_path, wheel),)
    run_state_machine_as_test(machine(layouts, derived), settings=WHEEL_SETTINGS)


# ---------------------------------------------------------------------------
# The machine finds each planted bug: one hunk of plugin.py changed.


@dataclass(frozen=True)
class PlantedBug:
    """One hunk of ``plugin.py`` changed, and where the machine must run to see it."""

    name: str
    #: What the machine's failure must say (a regular expression): the check that finds it.
    found_by: str
    #: The hunk: ``old`` (exactly once in plugin.py) becomes ``new``.
    old: str
    new: str
    #: The layouts ("0.34.0" or "unrecognised"); whether blocks are derived (None: as built).
    layouts: str = "0.34.0"
    derived: bool | None = None


PLANTED = (
    PlantedBug(
        "the finder forgets kv_cache_utils executed again",
        r"kv_cache_utils\.\w+ is .*, not (Ours|Derived)",
        "        self._loader.exec_module(module)\n        self._installation.rebind(module)\n",
        "        self._loader.exec_module(module)\n",
    ),
    PlantedBug(
        "only kv_cache_utils is rebound",
        r"block_pool\.\w+ is .*, not (Ours|Derived)",
        '        namespace = getattr(module, "__dict__", None)\n',
        "        if getattr(module, '__name__', None) != KV_CACHE_UTILS:\n"
        "            return False\n"
        '        namespace = getattr(module, "__dict__", None)\n',
    ),
    PlantedBug(
        "the loaded vLLM modules are not walked",
        r"vllm\.v1\.(other|core\.kv_cache_manager)\.\w+ is .*, not (Ours|Derived)",
        "        return [module.__name__ for module in loaded_vllm_modules()"
        " if self.rebind(module)]",
        "        return [\n"
        "            module.__name__ for module in loaded_vllm_modules()\n"
        "            if module.__name__ in (KV_CACHE_UTILS, BLOCK_POOL) and self.rebind(module)\n"
        "        ]",
    ),
    PlantedBug(
        "a module named vllm_... is taken for vLLM's",
        r"vllm_outside\.\w+ is .*, not Vllms",
        "        return [module.__name__ for module in loaded_vllm_modules()"
        " if self.rebind(module)]",
        "        return [\n"
        "            name for name, module in list(sys.modules.items())\n"
        '            if name.startswith("vllm") and module is not None and self.rebind(module)\n'
        "        ]",
    ),
    PlantedBug(
        "a reloaded plugin registers a second finder",
        r"installed_mode\(\) is 'off'|holds 2 finders",
        "_current_installation = plugin_installation\n",
        "_current_installation = lambda: next(\n"
        "    (f.installation for f in sys.meta_path if type(f) is _RebindingFinder), None\n"
        ")\n",
    ),
    PlantedBug(
        "uninstall puts back a reloaded kv_cache_utils' last class, not its first",
        r"kv_cache_utils\.\w+ is .*, not Vllms",
        "        for module, name, original in reversed(self.replaced):",
        "        for module, name, original in self.replaced:",
    ),
    PlantedBug(
        "uninstall leaves a module imported while installed on our class",
        r"vllm\.v1\.[\w.]+\.\w+ is .*, not Vllms",
        "                if cls is not None and namespace.get(name) is cls and name in originals:",
        "                if False:",
    ),
    PlantedBug(
        "uninstall leaves the finder",
        r"sys\.meta_path holds 1 finders",
        "for finder in sys.meta_path if not _is_plugin_finder(finder)]",
        "for finder in sys.meta_path if True or not _is_plugin_finder(finder)]",
    ),
    PlantedBug(
        "an unknown value is taken for production",
        r"must be refused \(bad value\)",
        "    mode = MODES.get(value.strip().lower())\n",
        '    mode = MODES.get(value.strip().lower(), "production")\n',
    ),
    PlantedBug(
        "another mode is taken silently",
        r"must be refused \(another mode\)",
        "        if current.mode != mode:\n",
        "        if False:\n",
    ),
    PlantedBug(
        "off imports vLLM",
        r"off, or a bad value, imported vLLM",
        '    mode = read_mode()\n    if mode == "off":\n        return\n'
        '    vllm = importlib.import_module("vllm")\n',
        '    vllm = importlib.import_module("vllm")\n'
        '    mode = read_mode()\n    if mode == "off":\n        return\n',
    ),
    PlantedBug(
        "vLLM's queue recognised by its name only",
        r"own_classes\.FreeKVCacheBlockQueue is .*, not its own class",
        "            and current.__module__ == KV_CACHE_UTILS\n",
        "",
    ),
    PlantedBug(
        "vLLM's block recognised by its name only",
        r"own_classes\.KVCacheBlock is .*, not its own class",
        "            and block.__module__ == KV_CACHE_UTILS\n",
        "",
        derived=True,
    ),
    PlantedBug(
        "a queue without prepend_n is taken",
        r"must be refused \(unrecognised\)",
        "    missing = [name for name in QUEUE_METHODS if not",
        "    missing = [name for name in QUEUE_METHODS[:-2] if not",
        layouts="unrecognised",
    ),
)


@pytest.mark.parametrize("bug", PLANTED, ids=[bug.name for bug in PLANTED])
def test_the_machine_finds_each_planted_bug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bug: PlantedBug
) -> None:
    """Each one-hunk bug in plugin.py fails the machine, within the derandomized examples."""
    if any(name == "vllm" or name.startswith("vllm.") for name in sys.modules):
        pytest.skip("a real vllm is loaded in this process")
    derived = verified_queue.COMPILED if bug.derived is None else bug.derived
    monkeypatch.delenv(VARIABLE, raising=False)
    monkeypatch.setattr(verified_queue, "COMPILED", derived)
    layouts = (
        unrecognised_layouts(tmp_path)
        if bug.layouts == "unrecognised"
        else (stand_in_layout(tmp_path, bug.layouts),)
    )
    planted = machine(layouts, derived, PluginSource((bug.old, bug.new)))
    with pytest.raises(AssertionError, match=bug.found_by):
        run_state_machine_as_test(planted, settings=PLANTED_SETTINGS)
    no_example_left()


def test_the_unchanged_source_passes_as_a_planted_bug_would_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """plugin.py loaded as the planted runs load it, with a hunk that changes nothing, passes."""
    if any(name == "vllm" or name.startswith("vllm.") for name in sys.modules):
        pytest.skip("a real vllm is loaded in this process")
    monkeypatch.delenv(VARIABLE, raising=False)
    unchanged = PluginSource(("__trace_library__ = True\n", "__trace_library__ = True\n"))
    layouts = (stand_in_layout(tmp_path, "0.34.0"),)
    control = machine(layouts, verified_queue.COMPILED, unchanged)
    run_state_machine_as_test(control, settings=settings(PLANTED_SETTINGS, max_examples=40))
    no_example_left()
