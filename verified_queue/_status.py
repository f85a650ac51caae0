"""What is in force in this process: the build, the check mode level, the vLLM plugin's rebindings.

:func:`verified_queue.status` returns a :class:`Status`, and ``python -m verified_queue
status`` prints one. Nothing here goes through logging, so the answer is there whatever a
host program (vLLM configures its logging late) did with its loggers.

Reading the status loads neither check mode nor the plugin. The check level is the one
``verified_queue`` read at import; the plugin's installation is read from its finder in
``sys.meta_path``, which is the one record of it in a process (see
:mod:`verified_queue.vllm.plugin`): the finder is recognised by :data:`FINDER_MARK`, an
attribute of its class, whichever copy of the plugin module made it.
"""

from __future__ import annotations

import os
import sys
import types
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "BLOCK_NAME",
    "FINDER_MARK",
    "QUEUE_NAME",
    "Status",
    "current",
    "is_plugin_finder",
    "loaded_vllm_modules",
    "plugin_installation",
]

#: The attribute that marks the plugin's finder in ``sys.meta_path`` (on its class, ``True``).
FINDER_MARK: Final = "_verified_queue_rebinds_vllm"
#: The names the plugin rebinds in vLLM's modules: its queue, and (compiled) its block.
QUEUE_NAME: Final = "FreeKVCacheBlockQueue"
BLOCK_NAME: Final = "KVCacheBlock"


def is_plugin_finder(finder: object) -> bool:
    """Whether ``finder`` is the vLLM plugin's, made by any copy of its module.

    Runtime complexity: O(1)

    >>> is_plugin_finder(object())
    False
    """
    try:
        return getattr(type(finder), FINDER_MARK) is True
    except Exception:  # no mark (AttributeError), or a class whose lookup raises: not the plugin's
        return False


def plugin_installation() -> Any:
    """The vLLM plugin's installation in force in this process (its finder's), or ``None``.

    Runtime complexity: O(len(sys.meta_path))
    """
    for finder in sys.meta_path:
        if is_plugin_finder(finder):
            return finder.installation  # type: ignore[attr-defined]  # the plugin's: it has one
    return None


def loaded_vllm_modules() -> list[types.ModuleType]:
    """Every loaded module of vLLM's (``vllm`` or ``vllm.*``, not ``vllm_...``), in load order.

    Runtime complexity: O(len(sys.modules))

    >>> all(module.__name__.startswith("vllm") for module in loaded_vllm_modules())
    True
    """
    return [
        module
        for name, module in list(sys.modules.items())
        if (name == "vllm" or name.startswith("vllm."))
        and isinstance(getattr(module, "__dict__", None), dict)  # sys.modules may hold None
    ]


def _name(value: object) -> str:
    """A class's dotted name (``module.QualName``), or the ``repr`` of anything else."""
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    return repr(value)


def _rebound(installation: Any) -> tuple[str, ...]:
    """Each vLLM name that holds the installation's class, sorted.

    ``"vllm.v1.core.block_pool.FreeKVCacheBlockQueue -> verified_queue.queue.FreeBlockQueue"``:
    each name the plugin rebound (listed once, if a module was executed again), and each
    that a vLLM module executed since imported from ``kv_cache_utils``; one that code
    outside the plugin bound to something else since is left out: it is no longer in force.
    """
    ours = [cls for cls in (installation.queue, installation.block) if cls is not None]
    modules = [module for module, _name_, _original in installation.replaced]
    found: set[str] = set()
    for module in [*modules, *loaded_vllm_modules()]:
        namespace = getattr(module, "__dict__", {})
        for name in (QUEUE_NAME, BLOCK_NAME):
            bound = namespace.get(name)
            if any(bound is cls for cls in ours):
                found.add(f"{getattr(module, '__name__', '?')}.{name} -> {_name(bound)}")
    return tuple(sorted(found))


@dataclass(frozen=True)
class Status:
    """What is in force in this process; ``str()`` of it is the report, one fact a line.

    ``check_level`` is ``"off"``, ``"on"``, ``"full"`` or ``"trace"`` (``VERIFIED_QUEUE_CHECKS``
    as read at import) and ``free_block_queue`` the class ``verified_queue.FreeBlockQueue``
    names for it. ``vllm_mode`` is the mode the vLLM plugin installed in this process
    (``"off"`` when it installed nothing) and ``vllm_rebound`` each vLLM name it rebound that
    still holds its class, as ``"module.name -> class"``. ``vllm_requested`` is
    ``VERIFIED_QUEUE_VLLM`` as this process's environment has it now (``""`` if unset): what
    vLLM processes started from it will install.
    """

    version: str
    compiled: bool
    check_level: str
    free_block_queue: str
    vllm_mode: str
    vllm_rebound: tuple[str, ...]
    vllm_requested: str

    @property
    def build(self) -> str:
        """``"compiled (mypyc)"`` or ``"pure Python"``.

        Runtime complexity: O(1)
        """
        return "compiled (mypyc)" if self.compiled else "pure Python"

    def __str__(self) -> str:
        """The report: the version and build, the check mode, the vLLM plugin."""
        lines = [
            f"verified_queue {self.version}, {self.build} build",
            f"check mode: {self.check_level} (VERIFIED_QUEUE_CHECKS): "
            f"verified_queue.FreeBlockQueue is {self.free_block_queue}",
        ]
        requested = f"VERIFIED_QUEUE_VLLM={self.vllm_requested!r} in the environment"
        if self.vllm_mode == "off":
            lines.append(f"vLLM plugin: nothing rebound in this process ({requested})")
        else:
            lines.append(
                f"vLLM plugin: VERIFIED_QUEUE_VLLM={self.vllm_mode} installed in this process, "
                f"{len(self.vllm_rebound)} names rebound ({requested})"
            )
            lines += [f"  {line}" for line in self.vllm_rebound]
        return "\n".join(lines)


def current() -> Status:
    """The :class:`Status` of this process now.

    Runtime complexity: O(len(sys.meta_path) + names the plugin rebound)
    """
    package: Any = sys.modules["verified_queue"]
    installation = plugin_installation()
    return Status(
        version=package.__version__,
        compiled=bool(package.COMPILED),
        check_level=package.CHECK_LEVEL,
        free_block_queue=_name(package.FreeBlockQueue),
        vllm_mode="off" if installation is None else str(installation.mode),
        vllm_rebound=() if installation is None else _rebound(installation),
        vllm_requested=os.environ.get("VERIFIED_QUEUE_VLLM", ""),
    )
