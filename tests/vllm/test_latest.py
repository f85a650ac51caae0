"""The upgrade check of tox -e vllm-latest: vLLM's shapes read and compared, on stand-in wheels."""

from __future__ import annotations

import zipfile
from pathlib import Path

from conformance import latest
from conformance.wheel import BLOCK_POOL, KV_CACHE_UTILS

KV = """
@dataclass(slots=True)
class KVCacheBlock:
    block_id: int
    ref_cnt: int = 0
    pool: "BlockPool | None" = field(default=None, kw_only=True)

    def reset_hash(self): ...


class FreeKVCacheBlockQueue:
    def __init__(self, blocks): ...
    def popleft_n(self, n): ...
"""

POOL = """
class BlockHashToBlockMap:
    def __init__(self): ...


class BlockPool:
    def free_blocks(self, ordered_blocks): ...
"""


def wheel(directory: Path, version: str, kv: str = KV, pool: str = POOL) -> Path:
    """A zip shaped like vLLM's wheel, holding the two files."""
    path = directory / f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(KV_CACHE_UTILS, kv)
        archive.writestr(BLOCK_POOL, pool)
    return path


def test_the_shape_lists_bases_decorators_fields_and_methods(tmp_path: Path) -> None:
    """Each class's decorator, fields with annotation and default, and methods are read."""
    lines = latest.shape(wheel(tmp_path, "1.0.0"))
    assert "KVCacheBlock @dataclass(slots=True)" in lines
    assert "KVCacheBlock field ref_cnt: int = 0" in lines
    assert (
        "KVCacheBlock field pool: 'BlockPool | None' = field(default=None, kw_only=True)" in lines
    )
    assert "FreeKVCacheBlockQueue method popleft_n(self, n)" in lines
    assert "BlockPool method free_blocks(self, ordered_blocks)" in lines
    assert "BlockHashToBlockMap method __init__(self)" in lines


def test_the_diff_names_what_changed_and_nothing_else(tmp_path: Path) -> None:
    """A new parameter and a changed field show as - and + lines; the same release, no change."""
    old = wheel(tmp_path, "1.0.0")
    new_pool = POOL.replace("ordered_blocks)", "ordered_blocks, evict_first=False)")
    new = wheel(tmp_path, "1.1.0", KV.replace("BlockPool | None", "weakref.ref | None"), new_pool)
    diff = latest.shape_diff(old, new, "1.0.0", "1.1.0")
    assert diff[0] == "vLLM 1.1.0 against 1.0.0: queue, block and pool shapes (4 lines changed)"
    assert sorted(diff[1:]) == sorted(
        [
            "-KVCacheBlock field pool: 'BlockPool | None' = field(default=None, kw_only=True)",
            "+KVCacheBlock field pool: 'weakref.ref | None' = field(default=None, kw_only=True)",
            "-BlockPool method free_blocks(self, ordered_blocks)",
            "+BlockPool method free_blocks(self, ordered_blocks, evict_first=False)",
        ]
    )
    assert latest.shape_diff(old, old, "1.0.0", "1.0.0") == [
        "vLLM 1.0.0 against 1.0.0: queue, block and pool shapes: no change"
    ]


def test_a_long_diff_keeps_to_one_screen_and_a_missing_class_shows(tmp_path: Path) -> None:
    """More changed lines than a screen are cut with a count; a vanished class is named."""
    methods = "".join(f"    def method_{index}(self): ...\n" for index in range(30))
    old = wheel(tmp_path, "1.0.0")
    new = wheel(
        tmp_path, "2.0.0", KV + "\n\nclass Other:\n    pass\n", "class BlockPool:\n" + methods
    )
    diff = latest.shape_diff(old, new, "1.0.0", "2.0.0")
    assert len(diff) == latest.SCREEN + 2
    assert diff[-1].startswith("... and ")
    assert "BlockHashToBlockMap missing from vllm/v1/core/block_pool.py" in latest.shape(new)
