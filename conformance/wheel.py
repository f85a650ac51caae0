"""vLLM's free-block code, read out of its wheel at run time, for each release we follow.

The conformance tests and the benchmark measure the queue against the engine
as it ships, not against a copy: this module opens a ``vllm`` wheel
(:data:`DEFAULT_VERSION` unless told otherwise; a zip file, nothing is
installed), reads
``vllm/v1/core/kv_cache_utils.py`` and ``vllm/v1/core/block_pool.py`` out of
it and executes them as private modules. Their heavy imports (torch, the
config system, the request and event types, ...) are stubbed in
``sys.modules`` only while the two files execute: a stubbed name used at run
time raises a ``RuntimeError`` that names it, so a stub can never stand in
silently for behaviour a test relies on.

Three shapes of vLLM's code can be loaded:

* unchanged: vLLM's ``KVCacheBlock`` and ``FreeKVCacheBlockQueue`` exactly as
  the wheel defines them (the benchmark's baseline, and the block type the
  pure-Python build must accept as it is);
* ``block_base=Block``: ``KVCacheBlock`` turned into a subclass of
  :class:`verified_queue.Block` by an AST transform (the base added, its own
  ``prev_free_block`` / ``next_free_block`` fields dropped), the form the
  compiled build needs;
* ``free_queue=FreeBlockQueue``: ``block_pool.py`` with the name
  ``FreeKVCacheBlockQueue`` bound to the given queue class, so vLLM's own
  ``BlockPool`` runs on it.

The wheel is found through ``VERIFIED_QUEUE_VLLM_WHEEL`` (a wheel file, or a
directory holding the wheels), which ``tox -e vllm`` sets after
``conformance/fetch.py`` has downloaded the wheels into ``.tox/``;
``VERIFIED_QUEUE_VLLM_VERSIONS`` (comma-separated) names the releases the
conformance tests run on (unset: :data:`PINNED_VERSIONS`, 0.34.0 and 0.33.0).
"""

from __future__ import annotations

import ast
import difflib
import functools
import logging
import os
import re
import sys
import types
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.fetch import DEFAULT_VERSION, PINNED_VERSIONS

__all__ = [
    "BLOCK_POOL",
    "DEFAULT_VERSION",
    "DROP_IN_EDITS",
    "KV_CACHE_UTILS",
    "LINK_FIELDS",
    "PINNED_VERSIONS",
    "TOX_WHEEL_DIR",
    "VERSIONS_ENV",
    "WHEEL_ENV",
    "VllmCode",
    "WheelNotFoundError",
    "configured_versions",
    "configured_wheel",
    "drop_in_diff",
    "find_wheel",
    "load_patched",
    "load_vllm",
    "patched_source",
    "read_member",
    "wheel_for_benchmark",
    "wheel_version",
]

#: The environment variable naming the wheel (a ``.whl`` file or a directory holding one).
WHEEL_ENV = "VERIFIED_QUEUE_VLLM_WHEEL"
#: The environment variable naming the releases to test (comma-separated; default the newest).
VERSIONS_ENV = "VERIFIED_QUEUE_VLLM_VERSIONS"
#: Where ``tox -e vllm`` keeps the downloaded wheel, inside the git-ignored ``.tox/``.
#: (``conformance/wheel.py``: the checkout is two levels up.)
TOX_WHEEL_DIR = Path(__file__).resolve().parents[1] / ".tox" / "vllm-wheel"
#: The two files read out of the wheel.
KV_CACHE_UTILS = "vllm/v1/core/kv_cache_utils.py"
BLOCK_POOL = "vllm/v1/core/block_pool.py"
#: The link fields vLLM's ``KVCacheBlock`` declares and a ``Block`` subclass must not.
LINK_FIELDS = ("prev_free_block", "next_free_block")

_WHEEL_NAME = re.compile(r"^vllm-(\d+(?:\.\d+)*)-")


class WheelNotFoundError(FileNotFoundError):
    """The configured location holds no vLLM wheel of the expected version."""


def wheel_version(wheel: Path) -> str:
    """Return the vLLM version a wheel's file name carries (``vllm-0.34.0-...whl``: ``0.34.0``)."""
    found = _WHEEL_NAME.match(wheel.name)
    if found is None:
        raise WheelNotFoundError(f"{wheel.name} is not named like a vllm wheel")
    return found.group(1)


def find_wheel(location: Path, version: str = DEFAULT_VERSION) -> Path:
    """Return the vLLM wheel at ``location``: the file itself, or the wheel of ``version`` in it.

    Raises :class:`WheelNotFoundError` naming the location when there is none.
    """
    pattern = f"vllm-{version}-*.whl"
    if location.is_file():
        return location
    if location.is_dir():
        found = sorted(location.glob(pattern))
        if found:
            return found[-1]
    raise WheelNotFoundError(
        f"no {pattern} at {location} (run `python conformance/fetch.py "
        f"{location} --version {version}` or `tox -e vllm` to download it)"
    )


def configured_versions() -> tuple[str, ...]:
    """Return the releases ``VERIFIED_QUEUE_VLLM_VERSIONS`` names, or every pinned one."""
    named = os.environ.get(VERSIONS_ENV, "")
    versions = tuple(part.strip() for part in named.split(",") if part.strip())
    return versions or PINNED_VERSIONS


def configured_wheel(version: str = DEFAULT_VERSION) -> Path | None:
    """Return the wheel ``VERIFIED_QUEUE_VLLM_WHEEL`` names, or ``None`` when it is unset.

    A set variable that names no wheel raises :class:`WheelNotFoundError`:
    whoever set it expects the conformance tests to run.
    """
    location = os.environ.get(WHEEL_ENV, "")
    if not location:
        return None
    return find_wheel(Path(location), version)


def wheel_for_benchmark() -> Path | None:
    """Return the configured wheel, else the one ``tox -e vllm`` cached, else ``None``."""
    location = os.environ.get(WHEEL_ENV, "")
    candidates = [Path(location)] if location else [TOX_WHEEL_DIR]
    for candidate in candidates:
        try:
            return find_wheel(candidate)
        except WheelNotFoundError:
            continue
    return None


def read_member(wheel: Path, member: str) -> str:
    """Return the text of ``member`` read out of the wheel (a zip file)."""
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(member).decode("utf-8")


# ---------------------------------------------------------------------------
# Stubs for the imports of the two files.


class _StubModule(types.ModuleType):
    """A module whose every unknown attribute is a placeholder that refuses to be used."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        placeholder = _placeholder(f"{self.__name__}.{name}")
        setattr(self, name, placeholder)
        return placeholder


def _placeholder(qualified_name: str) -> type:
    """Return a class that annotations may name but that raises when called or built."""

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError(
            f"{qualified_name} is stubbed out: only vLLM's block, queue and pool code is loaded"
        )

    return type(qualified_name.rpartition(".")[2], (), {"__init__": refuse})


def _refusing_function(qualified_name: str) -> Callable[..., Any]:
    """Return a function that raises when called, for a stubbed name compared by identity."""

    def refuse(*_args: object, **_kwargs: object) -> Any:
        raise RuntimeError(f"{qualified_name} is stubbed out")

    refuse.__name__ = qualified_name.rpartition(".")[2]
    return refuse


def _stub_modules() -> dict[str, types.ModuleType]:
    """Return fresh stub modules for every vLLM module the two files import."""
    names = [
        "vllm",
        "vllm.envs",
        "vllm.config",
        "vllm.logger",
        "vllm.multimodal",
        "vllm.multimodal.utils",
        "vllm.utils",
        "vllm.utils.hashing",
        "vllm.utils.math_utils",
        "vllm.utils.gc_utils",
        "vllm.distributed",
        "vllm.distributed.kv_events",
        "vllm.v1",
        "vllm.v1.core",
        "vllm.v1.core.kv_cache_metrics",
        "vllm.v1.kv_cache_interface",
        "vllm.v1.kv_cache_spec_registry",
        "vllm.v1.request",
        "vllm.v1.token_buffer",
        "vllm.v1.utils",
    ]
    modules: dict[str, types.ModuleType] = {name: _StubModule(name) for name in names}
    for name, module in modules.items():
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(modules[parent], child, module)
        module.__path__ = []  # every stub may act as a package
    # The few names the loaded code calls at import time or on the paths the tests drive.
    defined: dict[str, dict[str, Any]] = {
        "vllm.envs": {"VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES": False},
        "vllm.logger": {"init_logger": logging.getLogger},
        "vllm.utils.hashing": {
            name: _refusing_function(f"vllm.utils.hashing.{name}")
            for name in ("xxhash", "xxhash_cbor")
        },
        "vllm.utils.math_utils": {"cdiv": lambda a, b: -(a // -b)},
        # 0.34.0's BlockHashToBlockMap untracks its dict from the cyclic GC at creation:
        # no behaviour a test can see, so the stub hands the dict back as it is.
        "vllm.utils.gc_utils": {"gc_untrack": lambda obj: obj},
        "vllm.distributed.kv_events": {"MEDIUM_GPU": "GPU"},
    }
    for name, attributes in defined.items():
        vars(modules[name]).update(attributes)
    return modules


#: The names the two loaded files take in ``sys.modules`` while they execute.
_LOADED_NAMES = ("vllm.v1.core.kv_cache_utils", "vllm.v1.core.block_pool")


@contextmanager
def _stubbed(modules: dict[str, types.ModuleType]) -> Iterator[None]:
    """Put ``modules`` in ``sys.modules`` for the block, then restore exactly what was there."""
    managed = [*modules, *_LOADED_NAMES]
    saved = {name: sys.modules[name] for name in managed if name in sys.modules}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name in managed:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


# ---------------------------------------------------------------------------
# The KVCacheBlock transform.

#: The global name the transformed ``KVCacheBlock`` takes its base from.
_BASE_NAME = "_verified_queue_Block"


def as_block_subclass(tree: ast.Module) -> ast.Module:
    """Turn the ``KVCacheBlock`` class of ``tree`` into a subclass of ``_BASE_NAME``, in place.

    Drops its two link fields (the base owns them: a subclass that declared
    them again would shadow the base's slots) and adds the base. Raises
    ``LookupError`` if the class or either field is missing, so a vLLM
    release that reshapes the block fails loudly instead of loading unchanged.
    """
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "KVCacheBlock":
            kept = [
                statement
                for statement in node.body
                if not (
                    isinstance(statement, ast.AnnAssign)
                    and isinstance(statement.target, ast.Name)
                    and statement.target.id in LINK_FIELDS
                )
            ]
            if len(node.body) - len(kept) != len(LINK_FIELDS):
                raise LookupError(f"vLLM's KVCacheBlock does not declare exactly {LINK_FIELDS}")
            node.body = kept
            node.bases.append(ast.Name(id=_BASE_NAME, ctx=ast.Load()))
            return tree
    raise LookupError("no class KVCacheBlock in vLLM's kv_cache_utils.py")


# ---------------------------------------------------------------------------
# Loading.


@dataclass(frozen=True)
class VllmCode:
    """vLLM's two modules as loaded from the wheel, with the names the callers use.

    The properties keep vLLM's class names, so calling code reads like vLLM's.
    """

    kv_cache_utils: types.ModuleType
    block_pool: types.ModuleType

    @property
    def KVCacheBlock(self) -> type[Any]:
        """vLLM's block class (a ``Block`` subclass when loaded with ``block_base``)."""
        found: type[Any] = self.kv_cache_utils.KVCacheBlock
        return found

    @property
    def FreeKVCacheBlockQueue(self) -> type[Any]:
        """vLLM's own queue class, as the wheel defines it."""
        found: type[Any] = self.kv_cache_utils.FreeKVCacheBlockQueue
        return found

    @property
    def BlockPool(self) -> type[Any]:
        """vLLM's pool class, building whatever queue ``FreeKVCacheBlockQueue`` is bound to."""
        found: type[Any] = self.block_pool.BlockPool
        return found


def _execute(source: str | ast.Module, name: str, filename: str, extra: dict[str, Any]) -> Any:
    """Execute ``source`` as a fresh module registered as ``name`` (inside :func:`_stubbed`)."""
    module = types.ModuleType(name)
    module.__file__ = filename
    module.__dict__.update(extra)
    sys.modules[name] = module  # dataclasses look the defining module up while it executes
    exec(compile(source, filename, "exec"), module.__dict__)
    return module


@functools.cache
def load_vllm(
    wheel: Path, *, block_base: type | None = None, free_queue: type | None = None
) -> VllmCode:
    """Execute vLLM's ``kv_cache_utils.py`` and ``block_pool.py`` from ``wheel``.

    ``block_base``: make ``KVCacheBlock`` a subclass of it, without its own
    link fields (see :func:`as_block_subclass`). ``free_queue``: bind
    ``block_pool.FreeKVCacheBlockQueue`` to it, so ``BlockPool`` builds that
    queue. Neither changes a line of vLLM's code otherwise. The result is
    cached per argument tuple; the modules are private (not left in
    ``sys.modules``), so two shapes can be loaded side by side.
    """
    kv_source = read_member(wheel, KV_CACHE_UTILS)
    kv_code: str | ast.Module = kv_source
    extra: dict[str, Any] = {}
    if block_base is not None:
        kv_code = ast.fix_missing_locations(as_block_subclass(ast.parse(kv_source)))
        extra[_BASE_NAME] = block_base
    code = _execute_both(wheel, kv_code, read_member(wheel, BLOCK_POOL), extra)
    if free_queue is not None:
        vars(code.block_pool)["FreeKVCacheBlockQueue"] = free_queue
    return code


def _execute_both(
    wheel: Path, kv_code: str | ast.Module, pool_code: str, extra: dict[str, Any]
) -> VllmCode:
    """Execute the two files, in order, with vLLM's heavy imports stubbed."""
    with _stubbed(_stub_modules()):
        kv_cache_utils = _execute(
            kv_code, "vllm.v1.core.kv_cache_utils", f"{wheel.name}/{KV_CACHE_UTILS}", extra
        )
        block_pool = _execute(
            pool_code, "vllm.v1.core.block_pool", f"{wheel.name}/{BLOCK_POOL}", {}
        )
    return VllmCode(kv_cache_utils, block_pool)


# ---------------------------------------------------------------------------
# The change to vLLM's own files, as a user would make it (docs/vllm.md, "Using it in vLLM").

#: ``(file, old text, new text)``: each old text occurs exactly once in each pinned release's file.
#: block_pool.py's edits are all either build needs; kv_cache_utils.py's, the compiled build.
DROP_IN_EDITS: tuple[tuple[str, str, str], ...] = (
    (
        BLOCK_POOL,
        "from typing import Any\n\nfrom vllm.distributed",
        "from typing import Any\n\n"
        "from verified_queue import FreeBlockQueue\n\n"
        "from vllm.distributed",
    ),
    (
        BLOCK_POOL,
        "    ExternalBlockHash,\n    FreeKVCacheBlockQueue,\n",
        "    ExternalBlockHash,\n",
    ),
    (
        BLOCK_POOL,
        "self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)",
        "self.free_block_queue = FreeBlockQueue(self.blocks)",
    ),
    (
        KV_CACHE_UTILS,
        "    overload,\n)\n\nfrom vllm import envs",
        "    overload,\n)\n\nfrom verified_queue import Block\n\nfrom vllm import envs",
    ),
    (KV_CACHE_UTILS, "class KVCacheBlock:", "class KVCacheBlock(Block):"),
    (
        KV_CACHE_UTILS,
        "\n    # Used to construct a doubly linked list for free blocks.\n"
        "    # These two attributes should only be manipulated by FreeKVCacheBlockQueue.\n"
        '    prev_free_block: "KVCacheBlock | None" = None\n'
        '    next_free_block: "KVCacheBlock | None" = None\n',
        "",
    ),
)


def patched_source(wheel: Path, member: str) -> str:
    """Return ``member`` of the wheel with :data:`DROP_IN_EDITS` applied.

    Raises ``LookupError`` if an edit's old text does not occur exactly once,
    so a vLLM release that moved those lines fails loudly.
    """
    text = read_member(wheel, member)
    for file, old, new in DROP_IN_EDITS:
        if file != member:
            continue
        if text.count(old) != 1:
            raise LookupError(f"{member}: expected exactly one {old!r}")
        text = text.replace(old, new)
    return text


def drop_in_diff(wheel: Path, member: str) -> str:
    """Return the unified diff :data:`DROP_IN_EDITS` make to ``member``, two lines of context."""
    before = read_member(wheel, member).splitlines(keepends=True)
    after = patched_source(wheel, member).splitlines(keepends=True)
    return "".join(difflib.unified_diff(before, after, f"a/{member}", f"b/{member}", n=2))


@functools.cache
def load_patched(wheel: Path, *, compiled_form: bool) -> VllmCode:
    """Execute vLLM's two files with :data:`DROP_IN_EDITS` applied, as a user would ship them.

    Without ``compiled_form``, only ``block_pool.py`` is edited (what the
    pure-Python build needs); with it, ``kv_cache_utils.py`` too. The edited
    files import ``verified_queue`` itself, not a stub.
    """
    kv_code = (
        patched_source(wheel, KV_CACHE_UTILS)
        if compiled_form
        else read_member(wheel, KV_CACHE_UTILS)
    )
    return _execute_both(wheel, kv_code, patched_source(wheel, BLOCK_POOL), {})


def main(argv: list[str] | None = None) -> int:
    """Print the drop-in diff of both files: ``python -m conformance.wheel WHEEL``."""
    arguments = sys.argv[1:] if argv is None else argv
    if len(arguments) != 1:
        print("usage: python -m conformance.wheel WHEEL_OR_DIRECTORY", file=sys.stderr)
        return 2
    wheel = find_wheel(Path(arguments[0]))
    for member in (BLOCK_POOL, KV_CACHE_UTILS):
        print(drop_in_diff(wheel, member), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
