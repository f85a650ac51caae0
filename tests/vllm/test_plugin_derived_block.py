"""The compiled build's block: ``derive_block_class`` on stand-ins for vLLM's ``KVCacheBlock``.

Each stand-in is a slotted dataclass shaped like vLLM's block (the two links
among its fields), with one more option or member each test asks about: a
default, a default factory, ``init=False``, metadata, methods of every kind,
``eq=False``, ``order=True``, ``unsafe_hash=True``, ``frozen=True``, and
hand-written pickling. The derived class must keep every one of them but the
links, which :class:`verified_queue.Block` owns. No vLLM is needed: the
function takes the class, not vLLM's module. String annotations (this module's
``from __future__ import annotations``) are part of the shape: vLLM's own module
may not be in ``sys.modules`` when the class is derived.

The rest asks ``install`` and the plugin's finder, in this process, about what the
stand-in package of ``test_plugin.py`` does not show: vLLM modules made by hand
(in no ``sys.modules``, or no modules at all), finders and loaders of other kinds
next to the plugin's, and vLLM versions it cannot name.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import logging
import pickle
import sys
import types
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

import verified_queue
from verified_queue import Block
from verified_queue.block import LINK_FIELDS
from verified_queue.queue import FreeBlockQueue
from verified_queue.vllm import plugin
from verified_queue.vllm.checked import VllmCheckedFreeBlockQueue
from verified_queue.vllm.plugin import VllmPluginError


@dataclasses.dataclass(slots=True)
class KVCacheBlock:
    """KV-cache block metadata, as vLLM writes it, with a member of every kind."""

    block_id: int
    ref_cnt: int = 3
    pool: object = dataclasses.field(default=None, repr=False, compare=False, kw_only=True)
    hashes: list[bytes] = dataclasses.field(default_factory=list, metadata={"unit": "bytes"})
    prev_free_block: KVCacheBlock | None = None
    next_free_block: KVCacheBlock | None = None
    is_null: bool = False
    touched: int = dataclasses.field(default=0, init=False, hash=False)

    def reset_hash(self) -> None:
        """Forget the block's hashes."""
        self.hashes = []

    @property
    def hashed(self) -> bool:
        """Whether the block holds a hash."""
        return bool(self.hashes)

    @staticmethod
    def null_id() -> int:
        """The id of the null block."""
        return 0

    @classmethod
    def null(cls) -> KVCacheBlock:
        """A new null block."""
        return cls(cls.null_id(), is_null=True)

    def __repr__(self) -> str:
        return f"KVCacheBlock(block_id={self.block_id}, ref_cnt={self.ref_cnt})"


#: The fields a derived block keeps: vLLM's but the links, in vLLM's order.
KEPT = ["block_id", "ref_cnt", "pool", "hashes", "is_null", "touched"]


def derive(vllm_block: type) -> Any:
    """``derive_block_class(vllm_block)``, typed for attribute access."""
    derived: Any = plugin.derive_block_class(vllm_block)
    return derived


def option_values(field: dataclasses.Field[Any]) -> dict[str, Any]:
    """What a field declares, but its name and type: its default and flags."""
    return {
        "default": field.default,
        "default_factory": field.default_factory,
        "init": field.init,
        "repr": field.repr,
        "compare": field.compare,
        "hash": field.hash,
        "kw_only": field.kw_only,
        "metadata": dict(field.metadata),
    }


def test_a_derived_block_is_a_slotted_block_named_as_vllms() -> None:
    """The derived class subclasses Block, has slots only, and carries vLLM's names and doc."""
    derived = derive(KVCacheBlock)
    assert issubclass(derived, Block)
    assert derived.__vllm_block__ is KVCacheBlock
    assert (derived.__name__, derived.__qualname__) == ("KVCacheBlock", "KVCacheBlock")
    assert derived.__module__ == KVCacheBlock.__module__ == __name__
    assert derived.__doc__ == KVCacheBlock.__doc__
    block = derived(1)
    assert not hasattr(block, "__dict__")
    with pytest.raises(AttributeError):
        block.stray = 1


def test_the_derived_blocks_generated_methods_are_made_in_the_plugins_module() -> None:
    """``__init__`` and ``__eq__`` are generated in the plugin's module, on every Python.

    The class is built as the plugin's, so that dataclasses read its string
    annotations there (vLLM's module may not be in ``sys.modules`` yet), and only
    then named as vLLM's. Built with no module, Python 3.10 and 3.11 would make
    it the ``types`` module's, and tracebacks and profiles would name that
    module for the block's ``__init__``.
    """
    derived = derive(KVCacheBlock)
    assert derived.__init__.__module__ == plugin.__name__
    assert derived.__eq__.__module__ == plugin.__name__
    assert derived.__module__ == __name__


def test_a_derived_block_keeps_every_field_but_the_links_with_its_options() -> None:
    """Each field but the links keeps its type, default, factory, flags and metadata, in order."""
    derived = derive(KVCacheBlock)
    ours = {field.name: field for field in dataclasses.fields(derived)}
    theirs = {field.name: field for field in dataclasses.fields(KVCacheBlock)}
    assert list(ours) == KEPT
    assert not set(LINK_FIELDS) & set(ours)
    for name in KEPT:
        assert ours[name].type == theirs[name].type, name
        assert option_values(ours[name]) == option_values(theirs[name]), name
    assert ours["hashes"].metadata["unit"] == "bytes"
    assert ours["ref_cnt"].default == 3
    assert ours["hashes"].default_factory is list


def test_a_derived_block_is_built_with_vllms_defaults_and_factories() -> None:
    """A block built from the id alone gets each default, and a fresh list from the factory."""
    derived = derive(KVCacheBlock)
    first, second = derived(1), derived(2)
    assert (first.ref_cnt, first.pool, first.hashes, first.is_null, first.touched) == (
        3,
        None,
        [],
        False,
        0,
    )
    assert first.hashes is not second.hashes
    assert first.prev_free_block is None
    assert first.next_free_block is None


def test_the_derived_init_takes_vllms_parameters_but_the_links() -> None:
    """__init__ is generated for the derived fields: no link parameter, the rest in vLLM's order."""
    derived = derive(KVCacheBlock)
    parameters = inspect.signature(derived).parameters
    assert list(parameters) == ["block_id", "ref_cnt", "hashes", "is_null", "pool"]
    assert parameters["pool"].kind is inspect.Parameter.KEYWORD_ONLY
    # The fourth positional argument is is_null, not a link.
    block = derived(7, 1, [b"h"], True, pool="p")
    assert (block.block_id, block.ref_cnt, block.hashes, block.is_null, block.pool) == (
        7,
        1,
        [b"h"],
        True,
        "p",
    )
    assert block.prev_free_block is None
    with pytest.raises(TypeError):
        derived(1, prev_free_block=None)


def test_a_derived_block_keeps_vllms_methods_of_every_kind() -> None:
    """Methods, properties, static and class methods, and vLLM's own repr carry over."""
    derived = derive(KVCacheBlock)
    block = derived(2, hashes=[b"k"])
    assert block.hashed
    block.reset_hash()
    assert block.hashes == []
    assert not block.hashed
    assert derived.null_id() == 0
    null = derived.null()
    assert type(null) is derived
    assert (null.block_id, null.is_null) == (0, True)
    assert repr(block) == "KVCacheBlock(block_id=2, ref_cnt=3)"


def test_derived_blocks_compare_by_their_fields_never_by_their_links() -> None:
    """Equality follows vLLM's compared fields (not ``pool``), never the links; unhashable too."""
    derived = derive(KVCacheBlock)
    first, second = derived(1, pool="a"), derived(1, pool="b")
    assert first == second
    first.prev_free_block = derived(9)
    second.next_free_block = derived(8)
    assert first == second
    assert first != derived(1, ref_cnt=4)
    assert first != derived(2)
    with pytest.raises(TypeError, match="unhashable"):
        hash(first)
    with pytest.raises(TypeError, match="unhashable"):
        hash(KVCacheBlock(1))


def test_a_derived_block_matches_patterns_over_its_own_fields() -> None:
    """Positional patterns go over the derived fields, whatever vLLM's class binds there."""

    @dataclasses.dataclass(slots=True)
    class Bound:
        block_id: int
        prev_free_block: Bound | None = None
        next_free_block: Bound | None = None
        is_null: bool = False

    # dataclass leaves a __match_args__ of the class's own in place: this one is unusable.
    Bound.__match_args__ = property(lambda _: ("block_id", "prev_free_block"))  # type: ignore[misc,assignment]
    derived = derive(Bound)
    assert derived.__match_args__ == ("block_id", "is_null")
    match derived(4, True):
        case derived(block_id, is_null):
            assert (block_id, is_null) == (4, True)
        case _:  # pragma: no cover -- the assertion above is the test
            pytest.fail("no match")


@dataclasses.dataclass(slots=True, eq=False)
class IdentityBlock:
    """A block compared by identity."""

    block_id: int
    prev_free_block: IdentityBlock | None = None
    next_free_block: IdentityBlock | None = None
    is_null: bool = False


def test_a_block_without_eq_stays_compared_by_identity_and_hashable() -> None:
    """``eq=False`` carries over: equal fields are not equal blocks, and every block hashes."""
    derived = derive(IdentityBlock)
    first, second = derived(1), derived(1)
    assert first != second
    assert first == first  # noqa: PLR0124 -- identity is the point
    assert len({first, second}) == 2
    assert "__eq__" not in vars(derived)


@dataclasses.dataclass(slots=True, order=True)
class OrderedBlock:
    """A block ordered by its fields."""

    block_id: int
    ref_cnt: int = 0
    prev_free_block: OrderedBlock | None = None
    next_free_block: OrderedBlock | None = None
    is_null: bool = False


def test_an_ordered_block_stays_ordered_by_its_fields_not_its_links() -> None:
    """``order=True`` carries over, generated for the derived fields: the links take no part."""
    derived = derive(OrderedBlock)
    low, high = derived(1, 5), derived(2, 0)
    assert low < high
    assert low <= high
    assert high > low
    assert high >= low
    assert sorted([high, low]) == [low, high]
    twin = derived(1, 5)
    low.prev_free_block = high  # a link and None: vLLM's own order would compare them
    assert not low < twin
    assert not twin < low
    assert low <= twin
    assert twin >= low


@dataclasses.dataclass(slots=True, unsafe_hash=True)
class HashedBlock:
    """A block hashed by its fields."""

    block_id: int
    prev_free_block: HashedBlock | None = None
    next_free_block: HashedBlock | None = None
    is_null: bool = False


def test_an_unsafely_hashed_block_stays_hashed_by_its_fields() -> None:
    """``unsafe_hash=True`` carries over: equal blocks hash alike, whatever their links."""
    derived = derive(HashedBlock)
    first, second = derived(3), derived(3)
    first.next_free_block = derived(4)
    assert hash(first) == hash(second) == hash((3, False))
    assert len({first, second, derived(4)}) == 2


@dataclasses.dataclass(slots=True)
class PicklingBlock:
    """A block that pickles its own way."""

    block_id: int
    ref_cnt: int = 0
    prev_free_block: PicklingBlock | None = None
    next_free_block: PicklingBlock | None = None

    def __getstate__(self) -> object:
        return ("vllm", self.block_id)

    def __setstate__(self, state: tuple[str, int]) -> None:
        self.block_id = state[1]
        self.ref_cnt = -1


@pytest.mark.parametrize("deep", [False, True], ids=["copy", "deepcopy"])
def test_a_derived_block_copies_detached_through_blocks_own_state(deep: bool) -> None:
    """A derived block copies with every field and no link, by Block's state, not vLLM's own."""
    derived = derive(PicklingBlock)
    block = derived(6, 2)
    block.prev_free_block = derived(5)
    copied = copy.deepcopy(block) if deep else copy.copy(block)
    assert type(copied) is derived
    assert copied is not block
    assert (copied.block_id, copied.ref_cnt) == (6, 2)
    assert copied.prev_free_block is None
    assert copied.next_free_block is None
    state = block.__getstate__()
    assert state == (None, {"block_id": 6, "ref_cnt": 2})


def test_a_derived_block_pickles_where_its_name_is_bound() -> None:
    """Bound under vLLM's name in vLLM's module, a derived block pickles and loads detached."""
    derived = derive(PicklingBlock)
    original = globals()["PicklingBlock"]
    globals()["PicklingBlock"] = derived
    try:
        block = derived(6, 2)
        block.next_free_block = derived(7)
        loaded = pickle.loads(pickle.dumps(block))
    finally:
        globals()["PicklingBlock"] = original
    assert type(loaded) is derived
    assert (loaded.block_id, loaded.ref_cnt, loaded.next_free_block) == (6, 2, None)


@dataclasses.dataclass(slots=True, frozen=True)
class FrozenBlock:
    """A frozen block."""

    block_id: int
    prev_free_block: FrozenBlock | None = None
    next_free_block: FrozenBlock | None = None


def test_a_frozen_block_cannot_be_derived_and_says_why_in_one_line() -> None:
    """A frozen block would hook attribute setting, which Block refuses: one line names it."""
    with pytest.raises(VllmPluginError) as caught:
        plugin.derive_block_class(FrozenBlock)
    cause = caught.value.__cause__
    assert isinstance(cause, TypeError)
    assert "__setattr__" in str(cause)
    assert str(caught.value) == (
        f"cannot derive KVCacheBlock on verified_queue.Block ({cause}): "
        "use the pure build of verified-queue"
    )
    assert "\n" not in str(caught.value)


class SlottedNotDataclass:
    """Slots, but no dataclass."""

    __slots__ = ("block_id", "next_free_block", "prev_free_block")


@dataclasses.dataclass
class UnslottedBlock:
    """A dataclass without slots."""

    block_id: int
    prev_free_block: UnslottedBlock | None = None
    next_free_block: UnslottedBlock | None = None


@pytest.mark.parametrize("cls", [SlottedNotDataclass, UnslottedBlock, int])
def test_a_class_that_is_not_a_slotted_dataclass_is_refused_in_one_line(cls: type) -> None:
    """Without either slots or dataclass fields, the whole line says to use the pure build."""
    with pytest.raises(VllmPluginError) as caught:
        plugin.derive_block_class(cls)
    assert str(caught.value) == (
        "its KVCacheBlock is not a slotted dataclass, so no verified_queue.Block can stand in "
        "for it: use the pure build of verified-queue"
    )


# ---------------------------------------------------------------------------
# install() on vLLM modules made by hand: no file, no sys.modules entry.


class VllmQueue:
    """A queue shaped like vLLM's, as vLLM's kv_cache_utils defines it."""

    def __init__(self, blocks: list[Any]) -> None:
        self.blocks = list(blocks)

    def popleft(self) -> Any:
        """The first block, removed."""
        return self.blocks.pop(0)

    def popleft_n(self, n: int) -> list[Any]:
        """The first ``n`` blocks, removed."""
        return [self.popleft() for _ in range(n)]

    def remove(self, block: Any) -> None:
        """Remove ``block``."""
        self.blocks.remove(block)

    def append(self, block: Any) -> None:
        """Append ``block``."""
        self.blocks.append(block)

    def append_n(self, blocks: list[Any]) -> None:
        """Append ``blocks``."""
        self.blocks.extend(blocks)

    def prepend_n(self, blocks: list[Any]) -> None:
        """Prepend ``blocks``."""
        self.blocks[:0] = blocks

    def get_all_free_blocks(self) -> list[Any]:
        """Every block, in order."""
        return list(self.blocks)


VllmQueue.__module__ = plugin.KV_CACHE_UTILS


@dataclasses.dataclass(slots=True)
class VllmBlock:
    """vLLM's block fields, in vLLM's order."""

    block_id: int
    ref_cnt: int = 0
    pool: object = dataclasses.field(default=None, kw_only=True)
    prev_free_block: VllmBlock | None = None
    next_free_block: VllmBlock | None = None
    is_null: bool = False


def vllm_modules() -> tuple[types.ModuleType, types.ModuleType]:
    """A kv_cache_utils and a block_pool binding vLLM's queue and block, in no sys.modules."""
    kv_cache_utils = types.ModuleType(plugin.KV_CACHE_UTILS)
    block_pool = types.ModuleType(plugin.BLOCK_POOL)
    for namespace in (kv_cache_utils, block_pool):
        namespace.FreeKVCacheBlockQueue = VllmQueue  # type: ignore[attr-defined]
        namespace.KVCacheBlock = VllmBlock  # type: ignore[attr-defined]
    return kv_cache_utils, block_pool


@pytest.fixture
def uninstalled() -> Iterator[None]:
    """Nothing installed before the test, and nothing after."""
    if plugin.installed_mode() != "off":
        pytest.skip("the plugin is installed in this process")
    try:
        yield
    finally:
        plugin.uninstall()


class OwnModule(types.ModuleType):
    """A module type of a loader's own, which it creates for the spec it is given."""


class CreatingLoader(importlib.abc.Loader):
    """A loader (an editable install's, say) that creates the module itself, named by the spec."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        """A module of its own type, named as the spec says."""
        return OwnModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        """Bind vLLM's queue, as kv_cache_utils does."""
        module.FreeKVCacheBlockQueue = VllmQueue  # type: ignore[attr-defined]


class CreatingFinder(importlib.abc.MetaPathFinder):
    """The finder that answers for kv_cache_utils with the creating loader."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        """A spec with the creating loader, for kv_cache_utils only."""
        del path, target
        if fullname != plugin.KV_CACHE_UTILS:
            return None
        return importlib.machinery.ModuleSpec(fullname, CreatingLoader())


def test_the_plugins_loader_keeps_the_module_the_wrapped_loader_creates(
    uninstalled: None,
) -> None:
    """kv_cache_utils executed again under the plugin is the module its own loader created."""
    del uninstalled
    plugin.install("production", *vllm_modules(), compiled=False)
    spec = ask([CreatingFinder()], plugin.KV_CACHE_UTILS, None)
    assert type(spec.loader).__name__ == "_RebindingLoader"
    executed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(executed)
    assert type(executed) is OwnModule
    assert executed.__name__ == plugin.KV_CACHE_UTILS
    assert vars(executed)["FreeKVCacheBlockQueue"] is FreeBlockQueue


class OwnQueue(FreeBlockQueue[Any]):
    """This package's queue, subclassed where vLLM defines its own (as a vLLM may one day)."""


OwnQueue.__module__ = plugin.KV_CACHE_UTILS


class SlottedNamespace:
    """A kv_cache_utils that is an object without a ``__dict__``: its names are its class's."""

    __slots__ = ()
    FreeKVCacheBlockQueue = VllmQueue
    KVCacheBlock = VllmBlock


class ClassNamespace:
    """A block_pool that is a class: its namespace is read-only."""

    FreeKVCacheBlockQueue = VllmQueue
    KVCacheBlock = VllmBlock


def test_install_reports_only_the_modules_whose_names_it_rebound(
    uninstalled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loaded vLLM modules that bind vLLM's queue are rebound and reported after the two given;
    one that binds nothing, or this package's queue already, is neither."""
    del uninstalled
    unrelated, other, ours = (types.ModuleType(f"vllm.{name}") for name in ("a", "b", "c"))
    other.FreeKVCacheBlockQueue = VllmQueue  # type: ignore[attr-defined]
    ours.FreeKVCacheBlockQueue = OwnQueue  # type: ignore[attr-defined]
    for module in (unrelated, other, ours):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    kv_cache_utils, block_pool = vllm_modules()
    changed = plugin.install("production", kv_cache_utils, block_pool, compiled=False)
    assert changed[:2] == [plugin.KV_CACHE_UTILS, plugin.BLOCK_POOL]
    assert "vllm.b" in changed
    assert vars(other)["FreeKVCacheBlockQueue"] is FreeBlockQueue
    assert "vllm.a" not in changed
    assert "vllm.c" not in changed
    assert vars(ours)["FreeKVCacheBlockQueue"] is OwnQueue


def test_install_checks_but_never_rebinds_a_namespace_that_is_no_module(
    uninstalled: None,
) -> None:
    """Namespaces without a writable ``__dict__`` pass the shape check; nothing in them changes."""
    del uninstalled
    changed = plugin.install("production", SlottedNamespace(), ClassNamespace, compiled=False)
    assert "ClassNamespace" not in changed
    assert SlottedNamespace.FreeKVCacheBlockQueue is VllmQueue
    assert ClassNamespace.FreeKVCacheBlockQueue is VllmQueue
    assert plugin.installed_mode() == "production"


def test_register_names_a_vllm_without_a_version_unknown(
    uninstalled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """register() on a vLLM with no (or an empty) ``__version__`` says ``vLLM unknown``."""
    del uninstalled
    logger = types.ModuleType("vllm.logger")
    logger.init_logger = logging.getLogger  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm.logger", logger)
    monkeypatch.setitem(sys.modules, plugin.KV_CACHE_UTILS, types.ModuleType("no queue"))
    monkeypatch.setitem(sys.modules, plugin.BLOCK_POOL, types.ModuleType("no pool"))
    monkeypatch.setenv(plugin.ENVIRONMENT_VARIABLE, "production")
    for version in (None, ""):
        vllm = types.ModuleType("vllm")
        if version is not None:
            vllm.__version__ = version  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "vllm", vllm)
        with pytest.raises(VllmPluginError) as caught:
            plugin.register()
        assert str(caught.value) == (
            "vLLM unknown: no class FreeKVCacheBlockQueue in vllm.v1.core.kv_cache_utils; "
            "VERIFIED_QUEUE_VLLM=production refused, vLLM left unchanged"
        )
    assert plugin.installed_mode() == "off"


class VanishingBlockModule(types.ModuleType):
    """A kv_cache_utils whose KVCacheBlock is there when first read, then gone."""

    reads = 0

    @property
    def KVCacheBlock(self) -> type | None:
        """vLLM's block the first time, ``None`` after."""
        self.reads += 1
        return VllmBlock if self.reads == 1 else None


def test_a_block_gone_by_the_time_it_is_derived_is_refused_naming_the_version(
    uninstalled: None,
) -> None:
    """compiled: a KVCacheBlock that passed the shape check but is gone is refused in one line."""
    del uninstalled
    kv_cache_utils = VanishingBlockModule(plugin.KV_CACHE_UTILS)
    kv_cache_utils.FreeKVCacheBlockQueue = VllmQueue  # type: ignore[attr-defined]
    _, block_pool = vllm_modules()
    with pytest.raises(VllmPluginError) as caught:
        plugin.install("checked", kv_cache_utils, block_pool, vllm_version="9.9", compiled=True)
    assert str(caught.value) == "vLLM 9.9: no KVCacheBlock"
    assert plugin.installed_mode() == "off"
    assert vars(block_pool)["FreeKVCacheBlockQueue"] is VllmQueue


def test_a_second_install_rebinds_the_modules_it_is_given(uninstalled: None) -> None:
    """install() again in the same mode rebinds the modules it is given, loaded or not."""
    del uninstalled
    plugin.install("production", *vllm_modules(), compiled=False)
    kv_cache_utils, block_pool = vllm_modules()
    assert plugin.install("production", kv_cache_utils, block_pool, compiled=False) == []
    assert vars(kv_cache_utils)["FreeKVCacheBlockQueue"] is FreeBlockQueue
    assert vars(block_pool)["FreeKVCacheBlockQueue"] is FreeBlockQueue


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "pure"])
def test_install_logs_one_line_naming_the_build_and_what_it_rebound(
    uninstalled: None, compiled: bool
) -> None:
    """The line names the version, the build asked for, the mode and the names rebound."""
    del uninstalled
    lines: list[str] = []
    plugin.install(
        "production", *vllm_modules(), vllm_version="9.9", log=lines.append, compiled=compiled
    )
    build, rebound = (
        ("compiled", "FreeKVCacheBlockQueue and KVCacheBlock")
        if compiled
        else ("pure Python", "FreeKVCacheBlockQueue")
    )
    assert lines == [
        f"verified-queue {verified_queue.__version__} ({build} build), "
        f"VERIFIED_QUEUE_VLLM=production: vLLM 9.9's {rebound} -> "
        "verified_queue.queue.FreeBlockQueue"
    ]


# ---------------------------------------------------------------------------
# The plugin's finder, asked in this process (the loading tests ask it in a child).


class RecordingFinder(importlib.abc.MetaPathFinder):
    """Answers for kv_cache_utils with the creating loader; records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, Sequence[str] | None, types.ModuleType | None]] = []

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        """A spec with the creating loader, for kv_cache_utils only."""
        self.asked.append((fullname, path, target))
        if fullname != plugin.KV_CACHE_UTILS:
            return None
        return importlib.machinery.ModuleSpec(fullname, CreatingLoader(), origin="recording")


class DelegatingFinder(importlib.abc.MetaPathFinder):
    """Another plugin's finder of the same idiom: it asks every finder but itself."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        """The first spec another finder gives."""
        for finder in list(sys.meta_path):
            if finder is not self and hasattr(finder, "find_spec"):
                spec: importlib.machinery.ModuleSpec | None = finder.find_spec(
                    fullname, path, target
                )
                if spec is not None:
                    return spec
        return None


class OtherCopyFinder(importlib.abc.MetaPathFinder):
    """A finder marked as the plugin's (as a second copy of its module would make)."""

    _verified_queue_rebinds_vllm = True

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        """A spec of its own for anything."""
        del path, target
        return importlib.machinery.ModuleSpec(fullname, CreatingLoader(), origin="other copy")


class NoFindSpec:
    """A finder of the old protocol: no find_spec."""


class LoadOnlyLoader:
    """A loader of the old protocol: load_module, no exec_module."""

    def load_module(self, fullname: str) -> types.ModuleType:
        """The module, made and run in one step."""
        return types.ModuleType(fullname)


class LoadOnlyFinder(importlib.abc.MetaPathFinder):
    """Answers for kv_cache_utils with a loader of the old protocol."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        """A spec whose loader has no exec_module."""
        del path, target
        return importlib.machinery.ModuleSpec(fullname, LoadOnlyLoader())  # type: ignore[arg-type]


def plugin_finder() -> Any:
    """The plugin's finder, first in sys.meta_path."""
    ours = sys.meta_path[0]
    assert getattr(type(ours), "_verified_queue_rebinds_vllm", False)
    return ours


def ask(finders: list[object], *args: Any) -> Any:
    """The plugin's finder's answer, with ``finders`` next after it in sys.meta_path."""
    ours = plugin_finder()
    sys.meta_path[1:1] = finders  # type: ignore[assignment]
    try:
        return ours.find_spec(*args)
    finally:
        for finder in finders:
            sys.meta_path.remove(finder)  # type: ignore[arg-type]


def test_the_plugins_finder_answers_for_kv_cache_utils_only(uninstalled: None) -> None:
    """Any other module is left to the other finders: the plugin's finder asks none of them."""
    del uninstalled
    plugin.install("production", *vllm_modules(), compiled=False)
    recording = RecordingFinder()
    assert ask([recording], "json", None) is None
    assert ask([recording], "vllm.v1.core.block_pool", None) is None
    assert recording.asked == []


def test_the_plugins_finder_passes_the_path_and_target_on(uninstalled: None) -> None:
    """A reload's target and the package path reach the finder that answers."""
    del uninstalled
    plugin.install("production", *vllm_modules(), compiled=False)
    recording = RecordingFinder()
    target = types.ModuleType(plugin.KV_CACHE_UTILS)
    spec = ask([recording], plugin.KV_CACHE_UTILS, ["somewhere"], target)
    assert recording.asked == [(plugin.KV_CACHE_UTILS, ["somewhere"], target)]
    assert spec.origin == "recording"
    assert type(spec.loader).__name__ == "_RebindingLoader"


def test_the_plugins_finder_skips_finders_it_cannot_ask_and_the_plugins_own(
    uninstalled: None,
) -> None:
    """A finder without find_spec, and a finder of another copy of the plugin, are passed over."""
    del uninstalled
    plugin.install("production", *vllm_modules(), compiled=False)
    spec = ask([NoFindSpec(), OtherCopyFinder(), RecordingFinder()], plugin.KV_CACHE_UTILS, None)
    assert spec.origin == "recording"


def test_a_delegating_finder_and_the_plugins_do_not_recurse(uninstalled: None) -> None:
    """Asked back while it asks, the plugin's finder finds nothing; once done, it answers again."""
    del uninstalled
    plugin.install("production", *vllm_modules(), compiled=False)
    for _ in range(2):
        spec = ask([DelegatingFinder(), RecordingFinder()], plugin.KV_CACHE_UTILS, None)
        assert spec.origin == "recording"
        assert type(spec.loader).__name__ == "_RebindingLoader"


def test_a_loader_without_exec_module_is_left_unwrapped(uninstalled: None) -> None:
    """The plugin's loader runs exec_module: a loader of the old protocol is returned as it is."""
    del uninstalled
    plugin.install("production", *vllm_modules(), compiled=False)
    spec = ask([LoadOnlyFinder()], plugin.KV_CACHE_UTILS, None)
    assert type(spec.loader) is LoadOnlyLoader


def test_a_kv_cache_utils_without_a_block_is_refused_naming_what_is_missing(
    uninstalled: None,
) -> None:
    """No KVCacheBlock at all: refused before anything changes, naming the module and the
    version (``unknown`` when none is given)."""
    del uninstalled
    kv_cache_utils, block_pool = vllm_modules()
    del kv_cache_utils.KVCacheBlock
    with pytest.raises(VllmPluginError) as named:
        plugin.install("production", kv_cache_utils, block_pool, vllm_version="9.9")
    with pytest.raises(VllmPluginError) as unnamed:
        plugin.install("production", kv_cache_utils, block_pool)
    for version, caught in (("9.9", named), ("unknown", unnamed)):
        assert str(caught.value) == (
            f"vLLM {version}: no dataclass KVCacheBlock in vllm.v1.core.kv_cache_utils; "
            "VERIFIED_QUEUE_VLLM=production refused, vLLM left unchanged"
        )
    assert vars(kv_cache_utils)["FreeKVCacheBlockQueue"] is VllmQueue


def test_a_block_rebound_already_is_derived_again_from_vllms_own(uninstalled: None) -> None:
    """compiled: a kv_cache_utils whose KVCacheBlock is a derived class is read through it."""
    del uninstalled
    kv_cache_utils, block_pool = vllm_modules()
    kv_cache_utils.KVCacheBlock = derive(VllmBlock)  # type: ignore[attr-defined]
    plugin.install("production", kv_cache_utils, block_pool, compiled=True)
    installed: Any = plugin._current_installation()  # the installation: the block it derived
    assert installed.block.__vllm_block__ is VllmBlock
    assert [field.name for field in dataclasses.fields(installed.block)] == [
        "block_id",
        "ref_cnt",
        "pool",
        "is_null",
    ]


def test_a_kv_cache_utils_bound_to_this_packages_queue_already_is_accepted_as_it_is(
    uninstalled: None,
) -> None:
    """This package's checked queue (which takes more than the blocks) is no unknown queue."""
    del uninstalled
    kv_cache_utils, block_pool = vllm_modules()
    kv_cache_utils.FreeKVCacheBlockQueue = VllmCheckedFreeBlockQueue  # type: ignore[attr-defined]
    changed = plugin.install("checked", kv_cache_utils, block_pool, compiled=False)
    assert plugin.KV_CACHE_UTILS not in changed
    assert vars(kv_cache_utils)["FreeKVCacheBlockQueue"] is VllmCheckedFreeBlockQueue
    assert vars(block_pool)["FreeKVCacheBlockQueue"] is VllmCheckedFreeBlockQueue


def test_a_block_flagged_frozen_is_refused_even_without_its_attribute_hooks() -> None:
    """The derived class is frozen as vLLM's is flagged, even with vLLM's hooks gone: refused."""

    @dataclasses.dataclass(slots=True, frozen=True)
    class Unhooked:
        block_id: int
        prev_free_block: Unhooked | None = None
        next_free_block: Unhooked | None = None

    del Unhooked.__setattr__, Unhooked.__delattr__
    with pytest.raises(VllmPluginError, match=r"re-declares __setattr__, __delattr__"):
        plugin.derive_block_class(Unhooked)
