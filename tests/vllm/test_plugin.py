"""The vLLM plugin: on a stand-in vLLM package (always) and on vLLM's wheels under stubs.

The stand-in package is written to a temporary directory and imported as
``vllm``: a ``kv_cache_utils`` and a ``block_pool`` shaped like 0.34.0's (a
slotted ``KVCacheBlock`` dataclass with a keyword-only ``pool``, a queue class
built from the blocks), a logger, and a third module that binds the queue too.
No torch and no vLLM are needed. With ``VERIFIED_QUEUE_VLLM_WHEEL`` set (``tox
-e vllm``), the plugin also runs on vLLM's own two files of each pinned release.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import logging
import os
import subprocess
import sys
import textwrap
import weakref
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

import verified_queue
from conformance.wheel import load_vllm
from verified_queue import AlreadyInQueueError, Block, InvariantViolation
from verified_queue.queue import FreeBlockQueue
from verified_queue.vllm import plugin
from verified_queue.vllm.checked import VllmCheckedFreeBlockQueue
from verified_queue.vllm.plugin import VllmPluginError
from verified_queue.vllm.traced import VllmTracedFreeBlockQueue

KV_CACHE_UTILS = '''
import weakref
from dataclasses import dataclass, field


@dataclass(slots=True)
class KVCacheBlock:
    """KV-cache block metadata."""

    block_id: int
    ref_cnt: int = 0
    pool: "weakref.ref | None" = field(default=None, repr=False, compare=False, kw_only=True)
    block_hash: bytes | None = None
    prev_free_block: "KVCacheBlock | None" = None
    next_free_block: "KVCacheBlock | None" = None
    is_null: bool = False

    def reset_hash(self):
        self.block_hash = None

    def __repr__(self):
        return f"KVCacheBlock(block_id={self.block_id}, ref_cnt={self.ref_cnt})"


class FreeKVCacheBlockQueue:
    def __init__(self, blocks):
        self.blocks = list(blocks)
        self.num_free_blocks = len(self.blocks)

    def popleft(self): return self.blocks.pop(0)
    def popleft_n(self, n): return [self.popleft() for _ in range(n)]
    def remove(self, block): self.blocks.remove(block)
    def append(self, block): self.blocks.append(block)
    def append_n(self, blocks): self.blocks.extend(blocks)
    def prepend_n(self, blocks): self.blocks[:0] = list(blocks)
    def get_all_free_blocks(self): return list(self.blocks)
'''

BLOCK_POOL = """
import weakref
from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue, KVCacheBlock


class BlockPool:
    def __init__(self, num_blocks):
        self._weak_self = weakref.ref(self)
        self.blocks = [KVCacheBlock(i, pool=self._weak_self) for i in range(num_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        self.null_block = self.free_block_queue.popleft()

    def get_num_free_blocks(self):
        return self.free_block_queue.num_free_blocks

    def get_new_blocks(self, num_blocks):
        taken = self.free_block_queue.popleft_n(num_blocks)
        for block in taken:
            block.ref_cnt = 1
        return taken

    def free_blocks(self, ordered_blocks):
        freed = []
        for block in ordered_blocks:
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                freed.append(block)
        self.free_block_queue.prepend_n(freed)
"""

# The stand-in's KV-cache manager and coordinator: a request's blocks reach the pool through
# them, as in vLLM (the manager takes the request, the coordinator its id).
KV_CACHE_COORDINATOR = """
class KVCacheCoordinator:
    def __init__(self, block_pool):
        self.block_pool = block_pool
        self.req_to_blocks = {}

    def allocate(self, request_id, num_blocks):
        self.req_to_blocks[request_id] = self.block_pool.get_new_blocks(num_blocks)
        return self.req_to_blocks[request_id]

    def free(self, request_id):
        self.block_pool.free_blocks(reversed(self.req_to_blocks.pop(request_id)))
"""

KV_CACHE_MANAGER = """
from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.kv_cache_coordinator import KVCacheCoordinator


class KVCacheManager:
    def __init__(self, num_blocks):
        self.block_pool = BlockPool(num_blocks)
        self.coordinator = KVCacheCoordinator(self.block_pool)

    def allocate_slots(self, request, num_blocks):
        return self.coordinator.allocate(request.request_id, num_blocks)

    def free(self, request):
        self.coordinator.free(request.request_id)
"""

REQUEST = """
class Request:
    def __init__(self, request_id):
        self.request_id = request_id
"""

FILES = {
    "vllm/__init__.py": '__version__ = "0.34.0"\n',
    "vllm/logger.py": "import logging\n\ninit_logger = logging.getLogger\n",
    "vllm/v1/__init__.py": "",
    "vllm/v1/core/__init__.py": "",
    "vllm/v1/core/kv_cache_utils.py": KV_CACHE_UTILS,
    "vllm/v1/core/block_pool.py": BLOCK_POOL,
    "vllm/v1/core/kv_cache_coordinator.py": KV_CACHE_COORDINATOR,
    "vllm/v1/core/kv_cache_manager.py": KV_CACHE_MANAGER,
    "vllm/v1/request.py": REQUEST,
    "vllm/v1/other.py": "from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue\n",
    "vllm/v1/later.py": "from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue\n",
}


def write_package(root: Path, files: dict[str, str]) -> None:
    """Write ``files`` (path -> text) under ``root``."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def forget_vllm() -> None:
    """Drop every ``vllm`` module from ``sys.modules``."""
    for name in [name for name in sys.modules if name == "vllm" or name.startswith("vllm.")]:
        del sys.modules[name]


@pytest.fixture
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The stand-in vLLM on sys.path, its core and 'other' modules loaded; all undone after."""
    if any(name == "vllm" or name.startswith("vllm.") for name in sys.modules):
        pytest.skip("a real vllm is loaded in this process")
    write_package(tmp_path, FILES)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(plugin.ENVIRONMENT_VARIABLE, raising=False)
    importlib.invalidate_caches()
    for name in ("vllm.v1.core.block_pool", "vllm.v1.other"):
        importlib.import_module(name)
    try:
        yield tmp_path
    finally:
        plugin.uninstall()
        forget_vllm()


def module(name: str) -> Any:
    """A loaded module, typed Any."""
    return sys.modules[name]


def vllm_queue() -> type:
    """The stand-in's own queue class (kv_cache_utils' binding may have been replaced)."""
    found: type = vars(module("vllm.v1.other"))["FreeKVCacheBlockQueue"]
    return found


# ---------------------------------------------------------------------------
# The switch.


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        ("", "off"),
        ("off", "off"),
        (" OFF ", "off"),
        ("production", "production"),
        ("Checked", "checked"),
        ("TRACE", "trace"),
    ],
)
def test_read_mode_accepts_every_mode(value: str, mode: str) -> None:
    """Unset, empty and off mean off; production, checked, trace in any case, spaces trimmed."""
    assert plugin.read_mode({plugin.ENVIRONMENT_VARIABLE: value}) == mode
    assert plugin.read_mode({}) == "off"


@pytest.mark.parametrize("value", ["1", "on", "prod", "checked,production"])
def test_an_unknown_value_is_refused_in_one_line(value: str) -> None:
    """Any other value raises VllmPluginError in one line naming the value and the choices."""
    with pytest.raises(VllmPluginError) as caught:
        plugin.read_mode({plugin.ENVIRONMENT_VARIABLE: value})
    message = str(caught.value)
    assert "\n" not in message
    assert repr(value) in message
    assert message == (
        f"VERIFIED_QUEUE_VLLM={value!r}: expected off, production, checked or trace; "
        "vLLM left unchanged"
    )


def test_off_imports_nothing_from_vllm_nor_check_mode() -> None:
    """With the variable unset, register() loads no vllm module and no checker."""
    script = (
        "import sys\n"
        "from verified_queue.vllm import plugin\n"
        "plugin.register()\n"
        "loaded = [m for m in sys.modules if m == 'vllm' or m.startswith('vllm.')]\n"
        "loaded += [m for m in sys.modules if m.startswith('verified_queue.') and 'check' in m]\n"
        "print(loaded)\n"
    )
    for value in ("", "off"):
        environment = {"PATH": "", "VERIFIED_QUEUE_VLLM": value}
        done = subprocess.run(
            [sys.executable, "-c", script],
            env=environment,
            capture_output=True,
            text=True,
            check=True,
        )
        assert done.stdout == "[]\n"


def test_the_package_registers_the_entry_point() -> None:
    """The installed distribution names register() in vLLM's vllm.general_plugins group."""
    found = [
        entry
        for entry in metadata.entry_points(group="vllm.general_plugins")
        if entry.name == "verified_queue"
    ]
    assert [entry.value for entry in found] == ["verified_queue.vllm.plugin:register"]
    assert found[0].load() is plugin.register


# ---------------------------------------------------------------------------
# On the stand-in vLLM.


@pytest.mark.parametrize(
    ("mode", "queue"),
    [
        ("production", FreeBlockQueue),
        ("checked", VllmCheckedFreeBlockQueue),
        ("trace", VllmTracedFreeBlockQueue),
    ],
)
def test_register_rebinds_the_queue_in_every_module_that_bound_it(
    fake_vllm: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    mode: str,
    queue: type,
) -> None:
    """production and checked rebind FreeKVCacheBlockQueue in every loaded vLLM module, once."""
    del fake_vllm
    original = vllm_queue()
    monkeypatch.setenv(plugin.ENVIRONMENT_VARIABLE, mode)
    with caplog.at_level(logging.INFO, logger=plugin.LOGGER_NAME):
        plugin.register()
        plugin.register()  # vLLM may load its plugins more than once
    for name in ("vllm.v1.core.kv_cache_utils", "vllm.v1.core.block_pool", "vllm.v1.other"):
        assert module(name).FreeKVCacheBlockQueue is queue, name
    pool = module("vllm.v1.core.block_pool").BlockPool(5)
    assert [block.block_id for block in pool.free_block_queue] == [1, 2, 3, 4]
    assert type(pool.free_block_queue) is queue
    assert plugin.installed_mode() == mode
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 1
    build = "compiled" if verified_queue.COMPILED else "pure Python"
    assert f"verified-queue {verified_queue.__version__} ({build} build)" in lines[0]
    assert f"VERIFIED_QUEUE_VLLM={mode}" in lines[0]
    assert "vLLM 0.34.0" in lines[0]
    plugin.uninstall()
    assert module("vllm.v1.core.block_pool").FreeKVCacheBlockQueue is original


def test_the_rebinding_survives_a_reload_and_reaches_later_imports(
    fake_vllm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """importlib.reload of kv_cache_utils (vLLM's test_none_hash) and later imports get ours."""
    del fake_vllm
    monkeypatch.setenv(plugin.ENVIRONMENT_VARIABLE, "production")
    plugin.register()
    reloaded = importlib.reload(module("vllm.v1.core.kv_cache_utils"))
    assert reloaded.FreeKVCacheBlockQueue is FreeBlockQueue
    assert importlib.import_module("vllm.v1.later").FreeKVCacheBlockQueue is FreeBlockQueue
    plugin.uninstall()
    again = importlib.reload(module("vllm.v1.core.kv_cache_utils"))
    assert again.FreeKVCacheBlockQueue is not FreeBlockQueue


def test_a_fresh_import_of_kv_cache_utils_is_rebound_by_a_loader_that_answers_for_it(
    fake_vllm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kv_cache_utils imported anew (dropped from sys.modules first) is run by the plugin's
    loader and rebound, and that loader answers the rest of the protocol (its source,
    whether it is a package) as the file's own loader does, for tracebacks and inspect."""
    monkeypatch.setenv(plugin.ENVIRONMENT_VARIABLE, "production")
    name = "vllm.v1.core.kv_cache_utils"
    old = sys.modules[name]
    plugin.register()
    try:
        del sys.modules[name]
        fresh: Any = importlib.import_module(name)
        assert fresh is not old
        assert fresh.FreeKVCacheBlockQueue is FreeBlockQueue
        loader = fresh.__spec__.loader
        assert type(loader).__name__ == "_RebindingLoader"
        source = (fake_vllm / "vllm" / "v1" / "core" / "kv_cache_utils.py").read_text()
        assert loader.get_source(name) == source
        assert loader.is_package(name) is False
    finally:
        plugin.uninstall()
        sys.modules[name] = old


def test_status_lists_every_name_the_plugin_rebound(
    fake_vllm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verified_queue.status() names the mode and each rebound vLLM name, with no logging."""
    del fake_vllm
    assert verified_queue.status().vllm_mode == "off"
    monkeypatch.setenv(plugin.ENVIRONMENT_VARIABLE, "checked")
    logging.disable(logging.CRITICAL)  # the answer must not depend on any logger
    try:
        plugin.register()
        importlib.reload(module("vllm.v1.core.kv_cache_utils"))  # rebound again: listed once
        found = verified_queue.status()
    finally:
        logging.disable(logging.NOTSET)
    queue = "verified_queue.vllm.checked.VllmCheckedFreeBlockQueue"
    expected = [
        f"vllm.v1.core.{name}.FreeKVCacheBlockQueue -> {queue}"
        for name in ("block_pool", "kv_cache_utils")
    ] + [f"vllm.v1.other.FreeKVCacheBlockQueue -> {queue}"]
    assert found.vllm_mode == "checked"
    assert [line for line in found.vllm_rebound if "FreeKVCacheBlockQueue" in line] == expected
    blocks = [line for line in found.vllm_rebound if "FreeKVCacheBlockQueue" not in line]
    # The compiled build rebinds KVCacheBlock too, where vLLM defines it and builds blocks.
    assert [line.split(" -> ")[0] for line in blocks] == (
        ["vllm.v1.core.block_pool.KVCacheBlock", "vllm.v1.core.kv_cache_utils.KVCacheBlock"]
        if verified_queue.COMPILED
        else []
    )
    assert f"VERIFIED_QUEUE_VLLM=checked installed in this process, {len(found.vllm_rebound)}" in (
        str(found)
    )
    assert f"  {expected[0]}" in str(found).splitlines()
    plugin.uninstall()
    assert verified_queue.status().vllm_rebound == ()


def test_without_the_plugin_a_reload_brings_vllms_queue_back(fake_vllm: Path) -> None:
    """The reload test can fail: rebinding by hand alone does not survive a reload."""
    del fake_vllm
    kv_cache_utils = module("vllm.v1.core.kv_cache_utils")
    kv_cache_utils.FreeKVCacheBlockQueue = FreeBlockQueue
    reloaded = importlib.reload(kv_cache_utils)
    assert reloaded.FreeKVCacheBlockQueue is not FreeBlockQueue


#: Run in a child, with the stand-in vLLM on its path: each way of loading the plugin again.
LOADED_AGAIN = """
import importlib, importlib.util, sys
import verified_queue.vllm.plugin as plugin

def ours():
    return [f for f in sys.meta_path if type(f).__name__ == "_RebindingFinder"]

class Delegating:
    # Another plugin's finder of the same idiom: it asks every other finder but itself.
    def find_spec(self, name, path, target=None):
        if not name.startswith("vllm."):
            return None
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    return spec
        return None

way = sys.argv[1]
plugin.register()
if way == "reload":
    plugin = importlib.reload(plugin)
    plugin.register()
elif way == "second copy":
    spec = importlib.util.spec_from_file_location("plugin_copy", plugin.__file__)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    copy.register()
elif way == "another delegating finder":
    sys.meta_path.insert(0, Delegating())
    sys.meta_path.append(Delegating())
assert len(ours()) == 1, ours()
assert plugin.installed_mode() == "production", plugin.installed_mode()
later = importlib.import_module("vllm.v1.later")  # a vLLM module executed after register
assert later.FreeKVCacheBlockQueue.__module__ == "verified_queue.queue"
assert type(later.__spec__.loader).__name__ != "_RebindingLoader"  # only kv_cache_utils is wrapped
utils = importlib.reload(sys.modules["vllm.v1.core.kv_cache_utils"])
assert utils.FreeKVCacheBlockQueue.__module__ == "verified_queue.queue"
plugin.uninstall()
assert not ours(), ours()
assert plugin.installed_mode() == "off"
again = importlib.reload(sys.modules["vllm.v1.core.kv_cache_utils"])
assert again.FreeKVCacheBlockQueue.__module__ == "vllm.v1.core.kv_cache_utils"
print("ok")
"""


@pytest.mark.parametrize("way", ["twice", "reload", "second copy", "another delegating finder"])
def test_loading_the_plugin_again_leaves_one_finder_and_vllm_importable(
    tmp_path: Path, way: str
) -> None:
    """register() after a reload or from a second copy: one finder; no import recursion."""
    write_package(tmp_path, FILES)
    environment = {
        **os.environ,
        "PYTHONPATH": str(tmp_path),
        plugin.ENVIRONMENT_VARIABLE: "production",
    }
    done = subprocess.run(
        [sys.executable, "-c", LOADED_AGAIN, way],
        cwd=tmp_path,  # not the checkout: the installed package is the one under test
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


def test_another_mode_in_the_same_process_is_refused(
    fake_vllm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once production is in, checked is refused in one line and nothing changes."""
    del fake_vllm
    monkeypatch.setenv(plugin.ENVIRONMENT_VARIABLE, "production")
    plugin.register()
    monkeypatch.setenv(plugin.ENVIRONMENT_VARIABLE, "checked")
    with pytest.raises(VllmPluginError, match="already") as caught:
        plugin.register()
    assert "\n" not in str(caught.value)
    assert module("vllm.v1.core.block_pool").FreeKVCacheBlockQueue is FreeBlockQueue


def test_a_bad_value_leaves_vllm_untouched(
    fake_vllm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """register() with an unknown value raises before changing any module."""
    del fake_vllm
    original = vllm_queue()
    monkeypatch.setenv(plugin.ENVIRONMENT_VARIABLE, "yes")
    with pytest.raises(VllmPluginError, match="'yes'"):
        plugin.register()
    assert module("vllm.v1.core.block_pool").FreeKVCacheBlockQueue is original
    assert plugin.installed_mode() == "off"


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            ("    def prepend_n(self, blocks): self.blocks[:0] = list(blocks)\n", ""),
            "its FreeKVCacheBlockQueue has no prepend_n",
        ),
        (
            (
                "    def append_n(self, blocks): self.blocks.extend(blocks)\n"
                "    def prepend_n(self, blocks): self.blocks[:0] = list(blocks)\n",
                "",
            ),
            "its FreeKVCacheBlockQueue has no append_n, prepend_n",
        ),
        (
            ("    def __init__(self, blocks):", "    def __init__(self, blocks, size):"),
            "its FreeKVCacheBlockQueue(blocks, size) does not take just the blocks",
        ),
        (
            (
                "class FreeKVCacheBlockQueue:\n",
                "class FreeKVCacheBlockQueue:\n    __signature__ = 0\n",
            ),
            "its FreeKVCacheBlockQueue() does not take just the blocks",
        ),
        (
            ("    ref_cnt: int = 0\n", ""),
            "its KVCacheBlock has the fields block_id, pool, block_hash, prev_free_block, "
            "next_free_block, is_null, not block_id, ref_cnt, pool, prev_free_block, "
            "next_free_block, is_null",
        ),
        (
            ("@dataclass(slots=True)\nclass KVCacheBlock:", "class KVCacheBlock:"),
            "no dataclass KVCacheBlock in vllm.v1.core.kv_cache_utils",
        ),
    ],
    ids=[
        "no prepend_n",
        "no append_n nor prepend_n",
        "constructor",
        "unreadable constructor",
        "no ref_cnt",
        "no dataclass",
    ],
)
def test_an_unrecognised_vllm_is_refused_naming_its_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: tuple[str, str], problem: str
) -> None:
    """A queue or block of another shape: a one-line refusal naming vLLM's version and all it
    does not recognise (every missing method, every field), and no change."""
    if any(name == "vllm" or name.startswith("vllm.") for name in sys.modules):
        pytest.skip("a real vllm is loaded in this process")
    old, new = change
    assert old in KV_CACHE_UTILS
    files = {
        **FILES,
        "vllm/__init__.py": '__version__ = "0.99.0"\n',
        "vllm/v1/core/kv_cache_utils.py": KV_CACHE_UTILS.replace(old, new),
    }
    write_package(tmp_path, files)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(plugin.ENVIRONMENT_VARIABLE, "checked")
    importlib.invalidate_caches()
    try:
        block_pool = importlib.import_module("vllm.v1.core.block_pool")
        original = block_pool.FreeKVCacheBlockQueue
        with pytest.raises(VllmPluginError) as caught:
            plugin.register()
        # The whole line: the version, then what is not recognised, every name in it.
        assert str(caught.value) == (
            f"vLLM 0.99.0: {problem}; VERIFIED_QUEUE_VLLM=checked refused, vLLM left unchanged"
        )
        assert block_pool.FreeKVCacheBlockQueue is original
        assert plugin.installed_mode() == "off"
    finally:
        plugin.uninstall()
        forget_vllm()


def test_the_compiled_build_gets_a_derived_block_bound_where_blocks_are_built(
    fake_vllm: Path,
) -> None:
    """compiled: KVCacheBlock rebound to a Block subclass with vLLM's fields, methods, repr."""
    del fake_vllm
    kv_cache_utils = module("vllm.v1.core.kv_cache_utils")
    block_pool = module("vllm.v1.core.block_pool")
    original = kv_cache_utils.KVCacheBlock
    plugin.install("production", kv_cache_utils, block_pool, compiled=True)
    derived = block_pool.KVCacheBlock
    assert kv_cache_utils.KVCacheBlock is derived
    assert issubclass(derived, Block)
    assert derived.__vllm_block__ is original
    assert (derived.__module__, derived.__qualname__) == (original.__module__, "KVCacheBlock")
    fields = {field.name: field for field in dataclasses.fields(derived)}
    assert list(fields) == ["block_id", "ref_cnt", "pool", "block_hash", "is_null"]
    assert fields["pool"].kw_only
    assert not fields["pool"].repr
    assert "__dict__" not in dir(derived(1))
    pool = block_pool.BlockPool(4)
    assert all(type(block) is derived for block in pool.blocks)
    assert pool.blocks[1].pool() is pool
    assert repr(pool.blocks[2]) == "KVCacheBlock(block_id=2, ref_cnt=0)"
    pool.blocks[2].block_hash = b"k"
    pool.blocks[2].reset_hash()
    assert pool.blocks[2].block_hash is None
    assert [block.block_id for block in pool.free_block_queue.popleft_n(2)] == [1, 2]
    plugin.uninstall()
    assert block_pool.KVCacheBlock is original


def test_the_compiled_build_refuses_a_block_it_cannot_derive() -> None:
    """An unslotted vLLM block cannot become a Block: one line says to use the pure build."""

    @dataclasses.dataclass
    class KVCacheBlock:
        block_id: int

    with pytest.raises(VllmPluginError, match="use the pure build") as caught:
        plugin.derive_block_class(KVCacheBlock)
    assert "\n" not in str(caught.value)


# ---------------------------------------------------------------------------
# vLLM's counter writes under check mode.


@pytest.mark.parametrize("cls", [VllmCheckedFreeBlockQueue, VllmTracedFreeBlockQueue])
def test_checked_modes_take_an_outside_count_write_as_vllms_counter(
    cls: type[VllmCheckedFreeBlockQueue],
) -> None:
    """Writing num_free_blocks from outside offsets what vLLM reads; the links are still checked."""
    blocks = [Block() for _ in range(5)]
    queue = cls(blocks)
    queue.num_free_blocks = 0  # vLLM's offloading test fakes a full pool so
    assert queue.num_free_blocks == 0
    assert (len(queue), queue.count_offset) == (5, -5)
    taken = queue.popleft()
    queue.append(taken)
    queue.append_n([])
    assert queue.num_free_blocks == 0  # moved as vLLM's counter moves
    queue.full_check()
    queue.num_free_blocks = 5  # and restores it
    assert (queue.num_free_blocks, queue.count_offset) == (5, 0)
    with pytest.raises(TypeError, match="expected an int"):
        queue.num_free_blocks = -1
    assert queue.num_free_blocks == 5
    blocks[2].next_free_block = None  # damage to the links is still damage
    with pytest.raises(InvariantViolation):
        queue.popleft_n(3)


def test_the_trace_mode_names_who_wrote_vllms_counter() -> None:
    """In the trace level the outside write is history, and a later error names its line."""
    blocks = [Block() for _ in range(3)]
    queue = VllmTracedFreeBlockQueue(blocks)
    queue.num_free_blocks = 0
    with pytest.raises(AlreadyInQueueError) as caught:
        queue.append(blocks[1])
    history = caught.value.history  # type: ignore[attr-defined]
    assert any(line.startswith("freed before by:") for line in history.lines)
    assert history.count_written is not None
    assert history.count_written.filename == __file__


def test_the_plain_checked_queue_calls_the_same_write_damage() -> None:
    """The check can fail: CheckedFreeBlockQueue itself reports the counter write as damage."""
    queue = verified_queue.CheckedFreeBlockQueue([Block() for _ in range(3)])
    queue.num_free_blocks = 0
    with pytest.raises(InvariantViolation):
        queue.popleft()


# ---------------------------------------------------------------------------
# The trace mode names who called vLLM's KV-cache core, and the request.


def line_in(function: Any, text: str) -> int:
    """The line of ``function``'s source that holds ``text``, exactly one."""
    lines, first = inspect.getsourcelines(function)
    found = [first + offset for offset, line in enumerate(lines) if text in line]
    assert len(found) == 1, (function, text, found)
    return found[0]


def finish_all(manager: Any, finished: list[Any]) -> None:
    """A scheduler-like caller with no request of its own in its locals: vLLM's frames name it."""
    for each in finished:
        manager.free(each)


def connector_frees_by_id(
    pool: Any,
    blocks: list[Any],
    request_id: str,  # noqa: ARG001 -- the trace reads it from this frame
) -> None:
    """A connector-like caller: pins ``blocks`` by hand (the planted bug), frees them again."""
    for block in blocks:
        block.ref_cnt += 1
    pool.free_blocks(blocks)


def connector_frees_request(
    pool: Any,
    blocks: list[Any],
    request: Any,  # noqa: ARG001 -- the trace reads it from this frame
) -> None:
    """The same caller, holding the request object rather than its id."""
    for block in blocks:
        block.ref_cnt += 1
    pool.free_blocks(blocks)


def assert_called_here(
    operation: Any, name: str, function: Any, text: str, request: str | None
) -> None:
    """``operation`` is ``name`` from ``function``'s line holding ``text``, for ``request``."""
    assert operation is not None
    assert (operation.name, operation.filename) == (name, __file__), operation
    assert (operation.function, operation.lineno) == (
        function.__name__,
        line_in(function, text),
    ), operation
    assert operation.request == request, operation


@pytest.mark.parametrize("connector", [connector_frees_by_id, connector_frees_request])
def test_the_trace_mode_names_who_called_vllms_kv_cache_core_and_the_request(
    fake_vllm: Path, monkeypatch: pytest.MonkeyPatch, connector: Any
) -> None:
    """trace: each record names the caller of vLLM's manager or pool here, and the request.

    The first free's request is read from vLLM's frames (its caller names none),
    the second's from the caller's own ``request_id`` or ``request``; no line names
    the stand-in's ``block_pool.py`` or ``kv_cache_manager.py``.
    """
    del fake_vllm
    monkeypatch.setenv(plugin.ENVIRONMENT_VARIABLE, "trace")
    plugin.register()
    manager = importlib.import_module("vllm.v1.core.kv_cache_manager").KVCacheManager(6)
    request = importlib.import_module("vllm.v1.request").Request("req-1")
    allocated_at = sys._getframe().f_lineno + 1
    blocks = manager.allocate_slots(request, 2)
    finish_all(manager, [request])
    held = "req-1" if connector is connector_frees_by_id else request
    with pytest.raises(AlreadyInQueueError) as caught:
        connector(manager.block_pool, blocks, held)
    history = caught.value.history  # type: ignore[attr-defined]
    assert_called_here(history.call, "prepend_n", connector, "pool.free_blocks(blocks)", "req-1")
    (block,) = history.blocks
    assert_called_here(block.linked, "prepend_n", finish_all, "manager.free(each)", "req-1")
    # Taken by the allocation: this test, the request read from vLLM's coordinator.
    assert (block.unlinked.lineno, block.unlinked.request) == (allocated_at, "req-1")
    shown = "\n".join(history.lines)
    assert f"in {connector.__name__} for request 'req-1' (thread " in history.lines[0]
    assert "in finish_all for request 'req-1' (thread " in shown
    assert "block_pool.py" not in shown
    assert "kv_cache_manager.py" not in shown


def test_the_trace_mode_reads_no_request_outside_vllms_kv_cache_core(
    fake_vllm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """trace: a traced queue called straight from code outside vLLM records no request."""
    del fake_vllm
    monkeypatch.setenv(plugin.ENVIRONMENT_VARIABLE, "trace")
    plugin.register()
    blocks = [Block() for _ in range(3)]
    queue = VllmTracedFreeBlockQueue(blocks)
    request_id = "req-2"  # a local the walk would read, had it passed vLLM's core
    with pytest.raises(AlreadyInQueueError) as caught:
        queue.append(blocks[1])
    history = caught.value.history  # type: ignore[attr-defined]
    assert (history.call.filename, history.call.request) == (__file__, None)
    assert history.blocks[0].linked.request is None
    assert request_id not in "\n".join(history.lines)
    assert " for request " not in "\n".join(history.lines)


def test_without_the_trace_mode_the_records_name_vllms_block_pool(fake_vllm: Path) -> None:
    """The test can fail: the same queue bound by hand, with no plugin, names vLLM's pool."""
    del fake_vllm
    block_pool = module("vllm.v1.core.block_pool")
    block_pool.FreeKVCacheBlockQueue = VllmTracedFreeBlockQueue
    if verified_queue.COMPILED:  # the compiled queue links Block subclasses only
        block_pool.KVCacheBlock = plugin.derive_block_class(block_pool.KVCacheBlock)
    manager = importlib.import_module("vllm.v1.core.kv_cache_manager").KVCacheManager(6)
    request = importlib.import_module("vllm.v1.request").Request("req-3")
    blocks = manager.allocate_slots(request, 2)
    finish_all(manager, [request])
    with pytest.raises(AlreadyInQueueError) as caught:
        connector_frees_by_id(manager.block_pool, blocks, "req-3")
    history = caught.value.history  # type: ignore[attr-defined]
    assert history.call.filename == block_pool.__file__
    assert (history.call.function, history.call.request) == ("free_blocks", None)
    assert history.blocks[0].linked.filename == block_pool.__file__


# ---------------------------------------------------------------------------
# On vLLM's own files, read from its wheels.


@pytest.mark.parametrize("mode", ["production", "checked", "trace"])
@pytest.mark.parametrize("compiled", [False, True], ids=["pure block", "derived block"])
def test_the_plugin_runs_vllms_own_pool(wheel: Path, mode: str, compiled: bool) -> None:
    """vLLM's BlockPool, after install(), builds our queue and frees in vLLM's order."""
    if verified_queue.COMPILED and not compiled:
        pytest.skip("the compiled queue takes Block subclasses only")
    code = load_vllm(wheel)
    changed = plugin.install(
        mode, code.kv_cache_utils, code.block_pool, vllm_version=wheel.name, compiled=compiled
    )
    try:
        assert changed == ["vllm.v1.core.kv_cache_utils", "vllm.v1.core.block_pool"]
        pool = code.BlockPool(8, False, 16)
        queue = pool.free_block_queue
        assert isinstance(queue, FreeBlockQueue)
        assert isinstance(queue, VllmCheckedFreeBlockQueue) == (mode == "checked")
        assert isinstance(queue, VllmTracedFreeBlockQueue) == (mode == "trace")
        assert isinstance(pool.blocks[0], Block) == compiled
        reference = pool.blocks[1].pool
        owner = reference() if isinstance(reference, weakref.ref) else reference
        assert id(owner) == id(pool)
        early, late = pool.get_new_blocks(2), pool.get_new_blocks(2)
        pool.free_blocks(reversed(early))
        pool.free_blocks(reversed(late))
        assert [block.block_id for block in queue.get_all_free_blocks()] == [4, 3, 2, 1, 5, 6, 7]
    finally:
        plugin.uninstall()
    assert type(code.BlockPool(4, False, 16).free_block_queue) is code.FreeKVCacheBlockQueue


def test_the_trace_mode_passes_over_vllms_own_block_pool(wheel: Path) -> None:
    """trace on vLLM's own files: a double free through BlockPool.free_blocks names its callers.

    The second free comes after ``uninstall()``, from the pool built before it.
    """
    code = load_vllm(wheel)
    compiled = verified_queue.COMPILED  # the compiled queue takes the derived block only
    plugin.install(
        "trace", code.kv_cache_utils, code.block_pool, vllm_version=wheel.name, compiled=compiled
    )
    try:
        pool = code.BlockPool(8, False, 16)
        blocks = pool.get_new_blocks(2)
        freed_at = sys._getframe().f_lineno + 1
        pool.free_blocks(blocks)
    finally:
        plugin.uninstall()
    # A pool built before uninstall() keeps its traced queue, which keeps naming the callers.
    with pytest.raises(AlreadyInQueueError) as caught:
        connector_frees_by_id(pool, blocks, "req-4")
    history = caught.value.history  # type: ignore[attr-defined]
    assert_called_here(history.call, "prepend_n", connector_frees_by_id, "free_blocks", "req-4")
    linked = history.blocks[0].linked
    assert (linked.filename, linked.lineno, linked.request) == (__file__, freed_at, None)
    assert "block_pool.py" not in "\n".join(history.lines)
