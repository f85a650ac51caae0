"""What the vLLM plugin must have bound where: a model of one process, for a state machine.

``tests/vllm/test_plugin_machine.py`` drives a process (vLLM's modules imported and reloaded,
``register`` called under every value of ``VERIFIED_QUEUE_VLLM``, ``install`` and ``uninstall``
called, the plugin loaded again) and, after every step, compares every binding of
``FreeKVCacheBlockQueue`` and ``KVCacheBlock`` in every loaded module with this model. The model
knows nothing of the plugin's code: it is ``docs/vllm.md``'s account of the plugin, written as
transitions over symbolic bindings.

* Each execution of ``kv_cache_utils`` makes a new generation of vLLM's two classes
  (:class:`Vllms`); a module executed later binds what ``kv_cache_utils`` binds at that moment.
* A successful install rebinds, in every loaded ``vllm`` module (``vllm`` or ``vllm.*``, not a
  module merely named ``vllm_...``), each name that holds a vLLM class of any generation: the queue
  to the mode's queue (:class:`Ours`), and, when blocks are derived (the compiled build), the block
  to the one class derived at install from the vLLM block ``kv_cache_utils`` held
  (:class:`Derived`). A class a module defines itself (:class:`Own`) is never rebound, nor is one
  of this package's (from an earlier installation), nor any name outside vLLM's modules.
* While installed, every execution of ``kv_cache_utils`` is rebound at once.
* ``uninstall`` puts back, for each name the plugin replaced, what it held before the plugin first
  replaced it. A module executed while the plugin was installed imported the plugin's class
  itself, so the plugin never replaced that name: ``uninstall`` gives it vLLM's class too, the one
  ``kv_cache_utils`` held before the plugin first replaced it, and ``status()`` lists it while the
  plugin is installed.
* ``register`` reads the variable first: off imports nothing; a bad value is refused before
  anything is imported. Otherwise it imports ``vllm``, ``kv_cache_utils``, ``block_pool`` and
  ``vllm.logger`` and installs; a second mode is refused, the same mode again changes nothing
  and logs nothing; an unrecognised vLLM is refused with every binding as it was.

No asserts here: this is a helper module, and ``tox -e optimized`` runs the suite under ``-O``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

QUEUE: Final = "FreeKVCacheBlockQueue"
BLOCK: Final = "KVCacheBlock"
NAMES: Final = (QUEUE, BLOCK)
KV_CACHE_UTILS: Final = "vllm.v1.core.kv_cache_utils"
BLOCK_POOL: Final = "vllm.v1.core.block_pool"
#: The modes ``install`` takes, exactly so spelled.
MODES: Final = ("production", "checked", "trace")
#: ``VERIFIED_QUEUE_VLLM`` values, trimmed and lower-cased, and the mode each selects.
VALUES: Final = {"": "off", "off": "off", **{mode: mode for mode in MODES}}

#: Why the plugin refused a call: a bad value or mode, another mode installed, a vLLM it does
#: not recognise.
BAD_VALUE: Final = "bad value"
ANOTHER_MODE: Final = "another mode"
UNRECOGNISED: Final = "unrecognised"


@dataclass(frozen=True)
class Vllms:
    """vLLM's own class, of the ``generation``-th execution of ``kv_cache_utils`` (from 1)."""

    generation: int


@dataclass(frozen=True)
class Ours:
    """The queue class of the mode installation number ``installation`` was made with."""

    installation: int


@dataclass(frozen=True)
class Derived:
    """The block class installation number ``installation`` derived from vLLM's."""

    installation: int


@dataclass(frozen=True)
class Own:
    """A class of that name the module defines itself (not vLLM's, not ours)."""


Binding = Vllms | Ours | Derived | Own


@dataclass(frozen=True)
class ModuleShape:
    """A module of the stand-in process: what it imports first and what it binds.

    ``imports``: modules it imports before binding, in order; ``from_utils``: names it binds
    from ``kv_cache_utils`` (``from ... import``); ``defines``: names bound to classes of its own;
    ``vllms``: it is ``kv_cache_utils``, defining vLLM's classes under both names.
    """

    name: str
    imports: tuple[str, ...] = ()
    from_utils: tuple[str, ...] = ()
    defines: tuple[str, ...] = ()
    vllms: bool = False

    @property
    def is_vllm(self) -> bool:
        """Whether the plugin counts it as vLLM's: ``vllm`` or under ``vllm.``."""
        return self.name == "vllm" or self.name.startswith("vllm.")


@dataclass
class Installation:
    """One successful install: its mode, its derived block, what it replaced."""

    number: int
    mode: str
    #: The generation of vLLM's block the derived block was made from; ``None`` when blocks
    #: are not derived (the pure build).
    derived_from: int | None
    #: (module, name) -> the binding it had before the plugin first replaced it.
    replaced: dict[tuple[str, str], Binding] = field(default_factory=dict)


class ProcessModel:
    """The process as the plugin's documentation says it must be after each step.

    ``shapes``: the modules the process may load; ``derived``: whether installs derive the
    block (the compiled build); ``recognised``: whether the plugin recognises this vLLM.
    """

    def __init__(self, shapes: Sequence[ModuleShape], *, derived: bool, recognised: bool) -> None:
        self.shapes = {shape.name: shape for shape in shapes}
        self.derived = derived
        self.recognised = recognised
        self.generations = 0
        #: Loaded module -> name -> binding, for the modules in ``shapes``.
        self.bound: dict[str, dict[str, Binding]] = {}
        self.installation: Installation | None = None
        self.installations: list[Installation] = []
        #: ``VERIFIED_QUEUE_VLLM`` as the process has it (``None``: unset).
        self.environment: str | None = None
        #: Lines the plugin logged: one per install through ``register``.
        self.log_lines = 0

    # ------------------------------------------------------------------ modules

    def import_module(self, name: str) -> None:
        """``importlib.import_module(name)``: executed unless loaded already."""
        if name not in self.bound:
            self.execute(name)

    def execute(self, name: str) -> None:
        """An execution of ``name`` (its first import, or a reload): rebinds its names."""
        shape = self.shapes[name]
        for dependency in shape.imports:
            self.import_module(dependency)
        names: dict[str, Binding] = self.bound.get(name, {})
        if shape.vllms:
            self.generations += 1
            names = {QUEUE: Vllms(self.generations), BLOCK: Vllms(self.generations)}
        for each in shape.from_utils:
            names[each] = self.bound[KV_CACHE_UTILS][each]
        for each in shape.defines:
            names[each] = Own()
        self.bound[name] = names
        if shape.vllms and self.installation is not None:
            # The plugin's finder wrapped this execution's loader.
            self._rebind(self.installation, name)

    def loaded(self, name: str) -> bool:
        """Whether ``name`` is loaded."""
        return name in self.bound

    # ------------------------------------------------------------------ the plugin

    def register(self) -> str | None:
        """``register()``: what the variable says; the refusal, or ``None``."""
        mode = VALUES.get((self.environment or "").strip().lower())
        if mode is None:
            return BAD_VALUE
        if mode == "off":
            return None
        self.import_module(KV_CACHE_UTILS)
        self.import_module(BLOCK_POOL)
        return self.install(mode, logged=True)

    def install(self, mode: str, *, logged: bool = False) -> str | None:
        """``install(mode, kv_cache_utils, block_pool)``: the refusal, or ``None``."""
        if mode not in MODES:
            return BAD_VALUE
        current = self.installation
        if current is not None:
            if current.mode != mode:
                return ANOTHER_MODE
            for name in self._vllm_modules():
                self._rebind(current, name)
            return None
        if not self.recognised:
            return UNRECOGNISED
        derived_from: int | None = None
        if self.derived:
            derived_from = self._vllm_generation(self.bound[KV_CACHE_UTILS][BLOCK])
        installation = Installation(len(self.installations), mode, derived_from)
        self.installations.append(installation)
        self.installation = installation
        for name in self._vllm_modules():
            self._rebind(installation, name)
        if logged:
            self.log_lines += 1
        return None

    def uninstall(self) -> None:
        """``uninstall()``: every replaced name back to what it held first; no finder."""
        current = self.installation
        if current is not None:
            for (module, name), original in current.replaced.items():
                self.bound[module][name] = original
            for module in self._vllm_modules():
                for name, binding in self.bound[module].items():
                    first = current.replaced.get((KV_CACHE_UTILS, name))
                    if first is not None and self.is_installations(binding, current):
                        self.bound[module][name] = first
        self.installation = None

    # ------------------------------------------------------------------ reading it

    def mode(self) -> str:
        """``installed_mode()``."""
        return "off" if self.installation is None else self.installation.mode

    def rebound(self) -> list[tuple[str, str, Binding]]:
        """(module, name, binding) for each name ``status()`` lists: each vLLM one holding ours."""
        current = self.installation
        if current is None:
            return []
        return [
            (module, name, binding)
            for module in self._vllm_modules()
            for name, binding in self.bound[module].items()
            if self.is_installations(binding, current)
        ]

    def is_installations(self, binding: Binding, installation: Installation) -> bool:
        """Whether ``binding`` is the very class ``installation`` put in place.

        Two installations of one mode put in the same queue class; each derives its own block.
        """
        if isinstance(binding, Ours):
            return self.installations[binding.installation].mode == installation.mode
        return isinstance(binding, Derived) and binding.installation == installation.number

    # ------------------------------------------------------------------ inside

    def _vllm_modules(self) -> list[str]:
        """The loaded modules the plugin rebinds: the two it is given, then every other vLLM one."""
        first = [name for name in (KV_CACHE_UTILS, BLOCK_POOL) if name in self.bound]
        rest = [name for name in self.bound if self.shapes[name].is_vllm and name not in first]
        return first + rest

    def _vllm_generation(self, binding: Binding) -> int:
        """The generation of vLLM's block behind ``binding`` (a derived block names its own)."""
        if isinstance(binding, Vllms):
            return binding.generation
        if isinstance(binding, Derived):
            made_from = self.installations[binding.installation].derived_from
            if made_from is not None:
                return made_from
        raise LookupError(f"kv_cache_utils binds {binding} as its block")

    def _rebind(self, installation: Installation, name: str) -> None:
        """The plugin's rebinding of one module: vLLM's classes only, each to the installation's."""
        names = self.bound[name]
        replacements: dict[str, Binding] = {QUEUE: Ours(installation.number)}
        if installation.derived_from is not None:
            replacements[BLOCK] = Derived(installation.number)
        for each, replacement in replacements.items():
            if each in names and isinstance(names[each], Vllms):
                installation.replaced.setdefault((name, each), names[each])
                names[each] = replacement
