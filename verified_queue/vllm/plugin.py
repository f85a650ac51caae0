"""A vLLM general plugin: vLLM's own ``BlockPool`` on this package's queue, without editing vLLM.

The package registers :func:`register` in vLLM's ``vllm.general_plugins``
entry-point group. vLLM calls it in every process it starts (front end,
engine core, workers) through ``vllm.plugins.load_general_plugins()``,
possibly more than once, and loads every installed general plugin unless
``VLLM_PLUGINS`` names which. One environment variable decides what it does:

* ``VERIFIED_QUEUE_VLLM`` unset, empty or ``off``: nothing, and nothing of vLLM
  is imported;
* ``production``: ``FreeKVCacheBlockQueue`` is rebound to
  :class:`verified_queue.queue.FreeBlockQueue` in every loaded vLLM module that
  bound vLLM's class (``vllm.v1.core.kv_cache_utils``,
  ``vllm.v1.core.block_pool``, any other), and again whenever
  ``kv_cache_utils`` is executed again (vLLM's own ``test_none_hash`` reloads
  it); a vLLM module executed later imports the rebound name from there;
* ``checked``: the same with
  :class:`~verified_queue.vllm.checked.VllmCheckedFreeBlockQueue`, check
  mode inside a running vLLM;
* ``trace``: the same with the trace level of check mode
  (:class:`~verified_queue.vllm.traced.VllmTracedFreeBlockQueue`), whose errors also
  name where each block concerned was last linked and unlinked: the first frame
  outside vLLM's KV-cache core (the scheduler, a connector, a test), with the
  request id its frames carry (:func:`~verified_queue.vllm.traced.pass_over_kv_cache_core`).

The compiled build links :class:`verified_queue.Block` subclasses only, so
there ``KVCacheBlock`` is rebound as well, where vLLM constructs blocks
(``block_pool``) and where it is defined, to a class derived at run time from
vLLM's own (:func:`derive_block_class`); a vLLM block it cannot derive is
refused in one line that says to use the pure build.

The one record of what is installed in a process is the plugin's finder in
``sys.meta_path``: loading this module again (``importlib.reload``, or a second
copy under another name) and registering again finds it, so a process never has
two, and :func:`uninstall` removes every one. ``verified_queue.status()`` reads it
to list every vLLM name rebound, without logging and without loading this module.

Any other value of the variable, or a vLLM whose queue or block this module
does not recognise, raises :class:`VllmPluginError` in one line naming what it
saw, with vLLM left as it was. On success one line is logged through vLLM's
logger, naming the package version, the build and the mode; a second call in
the same process changes nothing and logs nothing.

vLLM is imported lazily and typed as ``Any``: this module imports, and
type-checks, without vLLM installed.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.abc
import importlib.machinery
import inspect
import os
import sys
import threading
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import verified_queue
from verified_queue._status import (
    BLOCK_NAME,
    QUEUE_NAME,
    is_plugin_finder,
    loaded_vllm_modules,
    plugin_installation,
)
from verified_queue.block import LINK_FIELDS, Block
from verified_queue.queue import FreeBlockQueue

__all__ = [
    "BLOCK_FIELDS",
    "ENVIRONMENT_VARIABLE",
    "MODES",
    "QUEUE_METHODS",
    "VllmPluginError",
    "derive_block_class",
    "install",
    "installed_mode",
    "read_mode",
    "register",
    "uninstall",
]

#: This module's frames are the library's (see ``verified_queue._trace_records``).
__trace_library__ = True

ENVIRONMENT_VARIABLE: Final = "VERIFIED_QUEUE_VLLM"
#: Accepted values (any case, spaces trimmed) and the mode each selects.
MODES: Final = {
    "": "off",
    "off": "off",
    "production": "production",
    "checked": "checked",
    "trace": "trace",
}
#: The vLLM modules that define (the first) and use the queue and the block.
KV_CACHE_UTILS: Final = "vllm.v1.core.kv_cache_utils"
BLOCK_POOL: Final = "vllm.v1.core.block_pool"
#: The logger, under vLLM's own, so vLLM's handlers and format print the line.
LOGGER_NAME: Final = "vllm.plugins.verified_queue"
#: What vLLM's queue must offer for this package's queue to stand in for it.
QUEUE_METHODS: Final = (
    "popleft",
    "popleft_n",
    "remove",
    "append",
    "append_n",
    "prepend_n",
    "get_all_free_blocks",
)
#: Fields vLLM's ``KVCacheBlock`` declares, in this order, from 0.33.0 on; a block without
#: them (it may have others between them) is not one this module knows.
BLOCK_FIELDS: Final = ("block_id", "ref_cnt", "pool", *LINK_FIELDS, "is_null")


class VllmPluginError(RuntimeError):
    """The plugin refused: a bad ``VERIFIED_QUEUE_VLLM``, or a vLLM it does not recognise."""


def read_mode(environ: Mapping[str, str] = os.environ) -> str:
    """Return ``"off"``, ``"production"``, ``"checked"`` or ``"trace"`` for ``VERIFIED_QUEUE_VLLM``.

    Raises :class:`VllmPluginError` for any other value.

    >>> read_mode({}), read_mode({"VERIFIED_QUEUE_VLLM": " Checked "})
    ('off', 'checked')
    """
    value = environ.get(ENVIRONMENT_VARIABLE, "")
    mode = MODES.get(value.strip().lower())
    if mode is None:
        raise VllmPluginError(
            f"{ENVIRONMENT_VARIABLE}={value!r}: expected off, production, checked or trace; "
            "vLLM left unchanged"
        )
    return mode


# ---------------------------------------------------------------------------
# Recognising vLLM's shapes.


def _is_ours(cls: object) -> bool:
    """Whether ``cls`` is one of this package's queues."""
    return isinstance(cls, type) and issubclass(cls, FreeBlockQueue)


def _vllm_block(kv_cache_utils: Any) -> type | None:
    """vLLM's own ``KVCacheBlock`` (the original, if the name was rebound), or ``None``."""
    block = getattr(kv_cache_utils, BLOCK_NAME, None)
    block = getattr(block, "__vllm_block__", block)
    if isinstance(block, type) and dataclasses.is_dataclass(block):
        return block
    return None


def _queue_problem(kv_cache_utils: Any) -> str | None:
    """What in vLLM's queue class this module does not recognise, or ``None``."""
    queue = getattr(kv_cache_utils, QUEUE_NAME, None)
    if not isinstance(queue, type):
        return f"no class {QUEUE_NAME} in {KV_CACHE_UTILS}"
    if _is_ours(queue):
        return None
    missing = [name for name in QUEUE_METHODS if not callable(getattr(queue, name, None))]
    if missing:
        return f"its {QUEUE_NAME} has no {', '.join(missing)}"
    try:
        parameters = list(inspect.signature(queue).parameters)
    except (TypeError, ValueError):
        parameters = []
    if parameters != ["blocks"]:
        return f"its {QUEUE_NAME}({', '.join(parameters)}) does not take just the blocks"
    return None


def _shape_problem(kv_cache_utils: Any, block_pool: Any) -> str | None:
    """What in vLLM's queue, block or pool module this module does not recognise, or ``None``."""
    problem = _queue_problem(kv_cache_utils)
    if problem is not None:
        return problem
    block = _vllm_block(kv_cache_utils)
    if block is None:
        return f"no dataclass {BLOCK_NAME} in {KV_CACHE_UTILS}"
    names = [field.name for field in dataclasses.fields(block)]
    if [name for name in names if name in BLOCK_FIELDS] != list(BLOCK_FIELDS):
        return f"its {BLOCK_NAME} has the fields {', '.join(names)}, not {', '.join(BLOCK_FIELDS)}"
    for name in (QUEUE_NAME, BLOCK_NAME):
        if name not in vars(block_pool):
            return f"its {BLOCK_POOL} does not bind {name}"
    return None


# ---------------------------------------------------------------------------
# The compiled build's block.


def derive_block_class(vllm_block: type) -> type:
    """Return a ``KVCacheBlock`` on :class:`Block` derived from vLLM's own dataclass.

    The same fields but the two links (which ``Block`` owns), with their
    defaults, factories, ``kw_only``, ``repr`` and ``compare`` flags; the same
    methods (``set_block_hash``, ``reset_hash``, vLLM's ``__repr__``, ...); the
    same dataclass options; slots. ``__vllm_block__`` names vLLM's class.
    Raises :class:`VllmPluginError` if the class is not a slotted dataclass or
    cannot be derived.
    """
    parameters = getattr(vllm_block, "__dataclass_params__", None)
    if parameters is None or "__slots__" not in vars(vllm_block):
        raise VllmPluginError(
            f"its {BLOCK_NAME} is not a slotted dataclass, so no verified_queue.Block can "
            "stand in for it: use the pure build of verified-queue"
        )
    specs: list[tuple[str, Any, Any]] = []
    for field in dataclasses.fields(vllm_block):
        if field.name in LINK_FIELDS:
            continue
        options: dict[str, Any] = {
            "init": field.init,
            "repr": field.repr,
            "compare": field.compare,
            "hash": field.hash,
            "kw_only": field.kw_only,
            "metadata": field.metadata,
        }
        if field.default is not dataclasses.MISSING:
            options["default"] = field.default
        if field.default_factory is not dataclasses.MISSING:
            options["default_factory"] = field.default_factory
        specs.append((field.name, field.type, dataclasses.field(**options)))
    generated = {"__init__", "__eq__", "__hash__", "__match_args__", "__setstate__"}
    generated |= {"__getstate__", "__lt__", "__le__", "__gt__", "__ge__"}
    namespace: dict[str, Any] = {
        name: value
        for name, value in vars(vllm_block).items()
        if isinstance(value, (types.FunctionType, property, staticmethod, classmethod))
        and name not in generated
    }
    namespace["__doc__"] = vllm_block.__doc__
    # Created as this module's (dataclasses resolve string annotations through the module
    # named here, and vLLM's may not be in sys.modules), then named as vLLM's.
    namespace["__module__"] = __name__
    namespace["__vllm_block__"] = vllm_block
    try:
        derived: type = dataclasses.make_dataclass(
            vllm_block.__name__,
            specs,
            bases=(Block,),
            namespace=namespace,
            eq=parameters.eq,
            order=parameters.order,
            unsafe_hash=parameters.unsafe_hash,
            frozen=parameters.frozen,
            slots=True,
        )
    except (TypeError, ValueError) as error:
        raise VllmPluginError(
            f"cannot derive {BLOCK_NAME} on verified_queue.Block ({error}): "
            "use the pure build of verified-queue"
        ) from error
    derived.__module__ = vllm_block.__module__
    derived.__qualname__ = vllm_block.__qualname__
    return derived


# ---------------------------------------------------------------------------
# Rebinding, now and in modules executed later.


class _Installation:
    """The queue (and block) put in place, and every binding replaced, to undo them."""

    def __init__(self, mode: str, queue: type, block: type | None) -> None:
        self.mode = mode
        self.queue = queue
        self.block = block
        self.replaced: list[tuple[types.ModuleType, str, object]] = []

    def rebind(self, module: types.ModuleType) -> bool:
        """Bind the queue (and block) in ``module`` where it bound vLLM's; say if it did."""
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            return False  # not a module (sys.modules may hold None, to block an import)
        changed = False
        current = namespace.get(QUEUE_NAME)
        if (
            isinstance(current, type)
            and not _is_ours(current)
            and current.__module__ == KV_CACHE_UTILS
        ):
            self.replaced.append((module, QUEUE_NAME, current))
            namespace[QUEUE_NAME] = self.queue
            changed = True
        block = namespace.get(BLOCK_NAME)
        if (
            self.block is not None
            and isinstance(block, type)
            and block is not self.block
            and not issubclass(block, Block)
            and block.__module__ == KV_CACHE_UTILS
        ):
            self.replaced.append((module, BLOCK_NAME, block))
            namespace[BLOCK_NAME] = self.block
            changed = True
        return changed

    def restore(self) -> None:
        """Put vLLM's classes back: every name replaced, and every name that took ours since.

        A vLLM module executed while installed imported the rebound names from
        ``kv_cache_utils`` itself, so no binding of it was replaced; each of its names
        that holds this installation's class gets vLLM's original back too.
        """
        for module, name, original in reversed(self.replaced):
            vars(module)[name] = original
        # What kv_cache_utils held before it was first replaced (reversed: the first wins).
        originals = {
            name: original
            for module, name, original in reversed(self.replaced)
            # A module whose __name__ outside code deleted is not kv_cache_utils (nor fails).
            if vars(module).get("__name__") == KV_CACHE_UTILS
        }
        ours = {QUEUE_NAME: self.queue, BLOCK_NAME: self.block}
        for module in loaded_vllm_modules():
            namespace = vars(module)
            for name, cls in ours.items():
                if cls is not None and namespace.get(name) is cls and name in originals:
                    namespace[name] = originals[name]

    def rebind_loaded(self) -> list[str]:
        """Rebind every loaded vLLM module; return the names of those changed."""
        return [module.__name__ for module in loaded_vllm_modules() if self.rebind(module)]


class _RebindingLoader(importlib.abc.Loader):
    """Runs another loader, then rebinds the module it executed."""

    def __init__(self, loader: Any, installation: _Installation) -> None:
        self._loader = loader
        self._installation = installation

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        """Let the wrapped loader create the module."""
        created: types.ModuleType | None = self._loader.create_module(spec)
        return created

    def exec_module(self, module: types.ModuleType) -> None:
        """Execute the module with the wrapped loader, then rebind its names."""
        self._loader.exec_module(module)
        self._installation.rebind(module)

    def __getattr__(self, name: str) -> Any:
        """``get_source``, ``is_package`` and the rest: the wrapped loader's."""
        return getattr(self._loader, name)


class _RebindingFinder(importlib.abc.MetaPathFinder):
    """First in ``sys.meta_path``: re-executions of ``kv_cache_utils`` are rebound too.

    Only that module needs it: it is where vLLM defines its queue and block, so
    only its re-execution (``importlib.reload``, which vLLM's own ``test_none_hash``
    does) can bring vLLM's classes back; a module executed later that imports them
    from it gets the rebound names already. The finder asks the other finders of
    ``sys.meta_path`` for the spec, not only the path finder, because an editable
    install of vLLM is found by a finder of its own there. It skips every finder of
    this plugin, and a call that comes back to it while it asks (another finder that
    delegates the same way) finds nothing, so two delegating finders cannot recurse.
    """

    # verified_queue._status.FINDER_MARK: the mark of this plugin's finder in sys.meta_path,
    # whichever copy of this module made it (one reloaded, or loaded twice under two names).
    # The finder is the one record of the installation in a process, so that there is only
    # ever one; verified_queue.status() reads it there without loading this module.
    _verified_queue_rebinds_vllm = True

    def __init__(self, installation: Any) -> None:
        self.installation = installation
        self._asking = threading.local()

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        """Return the spec the other finders give for ``kv_cache_utils``, its loader wrapped."""
        if fullname != KV_CACHE_UTILS or getattr(self._asking, "busy", False):
            return None
        self._asking.busy = True
        try:
            for finder in list(sys.meta_path):
                if _is_plugin_finder(finder) or not hasattr(finder, "find_spec"):
                    continue
                spec: importlib.machinery.ModuleSpec | None = finder.find_spec(
                    fullname, path, target
                )
                if spec is None:
                    continue
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _RebindingLoader(spec.loader, self.installation)
                return spec
            return None
        finally:
            self._asking.busy = False


#: Whether a finder is this plugin's, made by any copy of this module.
_is_plugin_finder = is_plugin_finder
#: The installation in force in this process (its finder's), or ``None``.
_current_installation = plugin_installation


def installed_mode() -> str:
    """The mode installed in this process: ``"off"`` or the mode :func:`install` was given."""
    installation = _current_installation()
    return "off" if installation is None else str(installation.mode)


def install(
    mode: str,
    kv_cache_utils: Any,
    block_pool: Any,
    *,
    vllm_version: str = "unknown",
    log: Callable[[str], object] | None = None,
    compiled: bool | None = None,
) -> list[str]:
    """Rebind vLLM's queue (and, compiled, its block) for ``mode``; return the modules changed.

    ``kv_cache_utils`` and ``block_pool`` are vLLM's modules (loaded or not
    through ``sys.modules``; every loaded ``vllm.*`` module is rebound too).
    ``mode`` is ``"production"``, ``"checked"`` or ``"trace"``; ``compiled`` defaults to
    the build in use. Idempotent: a second call with the mode in force only
    rebinds modules loaded since, and logs nothing; another mode is refused.
    Raises :class:`VllmPluginError`, having changed nothing, for a vLLM whose
    shapes it does not recognise.
    """
    if mode not in ("production", "checked", "trace"):
        raise VllmPluginError(
            f"{ENVIRONMENT_VARIABLE}={mode!r}: expected production, checked or trace"
        )
    current = _current_installation()
    if current is not None:
        if current.mode != mode:
            raise VllmPluginError(
                f"{ENVIRONMENT_VARIABLE}={mode}: this process runs vLLM with "
                f"{ENVIRONMENT_VARIABLE}={current.mode} already; vLLM left as it is"
            )
        for module in (kv_cache_utils, block_pool):
            current.rebind(module)
        changed_since: list[str] = current.rebind_loaded()
        return changed_since
    problem = _shape_problem(kv_cache_utils, block_pool)
    if problem is not None:
        raise VllmPluginError(
            f"vLLM {vllm_version}: {problem}; {ENVIRONMENT_VARIABLE}={mode} refused, "
            "vLLM left unchanged"
        )
    is_compiled = verified_queue.COMPILED if compiled is None else compiled
    block: type | None = None
    if is_compiled:
        vllm_block = _vllm_block(kv_cache_utils)
        if vllm_block is None:  # pragma: no cover -- _shape_problem refused it
            raise VllmPluginError(f"vLLM {vllm_version}: no {BLOCK_NAME}")
        try:
            block = derive_block_class(vllm_block)
        except VllmPluginError as error:
            raise VllmPluginError(f"vLLM {vllm_version}: {error}") from None
    queue: type
    if mode == "checked":
        from verified_queue.vllm.checked import (  # noqa: PLC0415 -- only when asked
            VllmCheckedFreeBlockQueue,
        )

        queue = VllmCheckedFreeBlockQueue
    elif mode == "trace":
        from verified_queue.vllm.traced import (  # noqa: PLC0415 -- only when asked
            VllmTracedFreeBlockQueue,
            pass_over_kv_cache_core,
        )

        queue = VllmTracedFreeBlockQueue
        # Records name who called vLLM's KV-cache core, not the core itself.
        pass_over_kv_cache_core(block_pool)
    else:
        queue = FreeBlockQueue
    installation = _Installation(mode, queue, block)
    changed = [
        module.__name__ for module in (kv_cache_utils, block_pool) if installation.rebind(module)
    ]
    changed += [name for name in installation.rebind_loaded() if name not in changed]
    sys.meta_path.insert(0, _RebindingFinder(installation))
    if log is not None:
        build = "compiled" if is_compiled else "pure Python"
        rebound = f"{QUEUE_NAME} and {BLOCK_NAME}" if block is not None else QUEUE_NAME
        log(
            f"verified-queue {verified_queue.__version__} ({build} build), "
            f"{ENVIRONMENT_VARIABLE}={mode}: vLLM {vllm_version}'s {rebound} -> "
            f"{queue.__module__}.{queue.__qualname__}"
        )
    return changed


def uninstall() -> None:
    """Undo :func:`install`: vLLM's own classes back where they were, the finder removed."""
    installations = [
        finder.installation  # type: ignore[attr-defined]  # ours: it has one
        for finder in sys.meta_path
        if _is_plugin_finder(finder)
    ]
    for installation in installations:
        installation.restore()
    sys.meta_path[:] = [finder for finder in sys.meta_path if not _is_plugin_finder(finder)]


def register() -> None:
    """The ``vllm.general_plugins`` entry point: act on ``VERIFIED_QUEUE_VLLM``."""
    mode = read_mode()
    if mode == "off":
        return
    vllm = importlib.import_module("vllm")
    kv_cache_utils = importlib.import_module(KV_CACHE_UTILS)
    block_pool = importlib.import_module(BLOCK_POOL)
    logger = importlib.import_module("vllm.logger").init_logger(LOGGER_NAME)
    install(
        mode,
        kv_cache_utils,
        block_pool,
        vllm_version=str(getattr(vllm, "__version__", None) or "unknown"),
        log=logger.info,
    )
