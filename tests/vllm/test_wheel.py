"""The vLLM wheel loader and download script, on small stand-in wheels (no vLLM needed)."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conformance import fetch as fetch_vllm_wheel
from conformance.wheel import (
    BLOCK_POOL,
    DEFAULT_VERSION,
    KV_CACHE_UTILS,
    PINNED_VERSIONS,
    TOX_WHEEL_DIR,
    VERSIONS_ENV,
    WHEEL_ENV,
    WheelNotFoundError,
    as_block_subclass,
    configured_versions,
    configured_wheel,
    find_wheel,
    load_vllm,
    wheel_version,
)
from verified_queue import Block, FreeBlockQueue

#: A stand-in for vLLM's kv_cache_utils.py: its imports, its block's shape, a name that is stubbed.
KV_SOURCE = """
from dataclasses import dataclass
from vllm import envs
from vllm.logger import init_logger
from vllm.v1.request import Request

logger = init_logger(__name__)


@dataclass(slots=True)
class KVCacheBlock:
    block_id: int
    ref_cnt: int = 0
    # The links, as vLLM declares them.
    prev_free_block: "KVCacheBlock | None" = None
    next_free_block: "KVCacheBlock | None" = None
    is_null: bool = False


class FreeKVCacheBlockQueue:
    def __init__(self, blocks: list[KVCacheBlock]) -> None:
        self.blocks = blocks


def new_request() -> Request:
    return Request()
"""

POOL_SOURCE = """
from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue, KVCacheBlock


class BlockPool:
    def __init__(self, count: int) -> None:
        self.blocks = [KVCacheBlock(i) for i in range(count)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
"""


def stand_in_wheel(directory: Path, kv_source: str = KV_SOURCE) -> Path:
    """Write a zip shaped like the vllm wheel, holding the two stand-in files."""
    wheel = directory / f"vllm-{DEFAULT_VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(KV_CACHE_UTILS, kv_source)
        archive.writestr(BLOCK_POOL, POOL_SOURCE)
    return wheel


def test_no_variable_means_no_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without VERIFIED_QUEUE_VLLM_WHEEL no wheel is configured (the conformance tests skip)."""
    monkeypatch.delenv(WHEEL_ENV, raising=False)
    assert configured_wheel() is None


def test_a_variable_naming_no_wheel_raises(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A set variable whose directory holds no wheel raises, naming the place and the fix."""
    monkeypatch.setenv(WHEEL_ENV, str(tmp_path))
    with pytest.raises(WheelNotFoundError, match=r"conformance/fetch\.py") as caught:
        configured_wheel()
    assert str(tmp_path) in str(caught.value)


def test_the_benchmark_looks_where_tox_puts_the_wheel() -> None:
    """TOX_WHEEL_DIR is tox's {work_dir}/vllm-wheel: the checkout's .tox, not one inside specs/."""
    checkout = Path(__file__).resolve().parents[2]
    assert (checkout / "tox.ini").is_file()
    assert checkout / ".tox" / "vllm-wheel" == TOX_WHEEL_DIR


def test_a_directory_or_the_file_itself_finds_the_wheel(tmp_path: Path) -> None:
    """find_wheel takes the wheel file or the directory that holds it."""
    wheel = stand_in_wheel(tmp_path)
    assert find_wheel(tmp_path) == wheel
    assert find_wheel(wheel) == wheel


def test_the_loaded_modules_leave_sys_modules_as_they_were(tmp_path: Path) -> None:
    """Loading stubs vLLM's imports only while its files execute, and keeps no vllm module."""
    before = {name for name in sys.modules if name.startswith("vllm")}
    code = load_vllm(stand_in_wheel(tmp_path))
    assert {name for name in sys.modules if name.startswith("vllm")} == before
    assert code.KVCacheBlock(3).block_id == 3
    assert code.BlockPool(2).free_block_queue.blocks[1].block_id == 1


def test_a_stubbed_name_used_at_run_time_raises_naming_itself(tmp_path: Path) -> None:
    """A stub stands in for a name only until something uses it."""
    code = load_vllm(stand_in_wheel(tmp_path))
    with pytest.raises(RuntimeError, match=r"vllm\.v1\.request\.Request is stubbed out"):
        code.kv_cache_utils.new_request()


def test_the_block_subclass_form_drops_the_links_and_runs_in_our_queue(tmp_path: Path) -> None:
    """With block_base, KVCacheBlock is a Block minus its own links; the pool builds our queue."""
    code = load_vllm(stand_in_wheel(tmp_path), block_base=Block, free_queue=FreeBlockQueue)
    block_class: type[Any] = code.KVCacheBlock
    assert [field.name for field in dataclasses.fields(block_class)] == [
        "block_id",
        "ref_cnt",
        "is_null",
    ]
    assert issubclass(block_class, Block)
    pool = code.BlockPool(3)
    assert isinstance(pool.free_block_queue, FreeBlockQueue)
    assert [block.block_id for block in pool.free_block_queue] == [0, 1, 2]


def test_the_transform_refuses_a_block_of_another_shape() -> None:
    """A KVCacheBlock without both link fields, or none at all, raises LookupError."""
    one_link = KV_SOURCE.replace('    next_free_block: "KVCacheBlock | None" = None\n', "")
    with pytest.raises(LookupError, match="exactly"):
        as_block_subclass(ast.parse(one_link))
    with pytest.raises(LookupError, match="no class KVCacheBlock"):
        as_block_subclass(ast.parse("x = 1\n"))


def test_fetch_keeps_a_cached_wheel(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The download script prints a wheel already in the directory and downloads nothing."""
    wheel = stand_in_wheel(tmp_path)
    assert fetch_vllm_wheel.main([str(tmp_path), "--version", DEFAULT_VERSION]) == 0
    assert capsys.readouterr().out == f"{wheel}\n"
    with pytest.raises(SystemExit) as caught:
        fetch_vllm_wheel.main([])
    assert caught.value.code == 2


def test_fetch_refuses_a_version_that_is_not_a_release_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A version such as 'latest' or '0.34.0; rm' is refused in one line, nothing downloaded."""
    for version in ("latest", "0.34.0; rm -r /", ""):
        assert fetch_vllm_wheel.main([str(tmp_path), "--version", version]) == 1
        assert "expected a release number" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_wheel_name_carries_the_version_and_the_default_is_the_newest_pin(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """wheel_version reads a wheel's name; VERIFIED_QUEUE_VLLM_VERSIONS names the releases."""
    assert wheel_version(stand_in_wheel(tmp_path)) == DEFAULT_VERSION
    with pytest.raises(WheelNotFoundError, match="not named like"):
        wheel_version(tmp_path / "torch-2.13.0-cp311.whl")
    monkeypatch.delenv(VERSIONS_ENV, raising=False)
    assert configured_versions() == PINNED_VERSIONS
    assert PINNED_VERSIONS[0] == DEFAULT_VERSION == "0.34.0"
    monkeypatch.setenv(VERSIONS_ENV, " 0.34.0, 0.33.0 ,")
    assert configured_versions() == ("0.34.0", "0.33.0")


class FakeVersion:
    """What pip's finder gives as a candidate's version: comparable, with release flags."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.is_prerelease = "rc" in text
        self.is_devrelease = "dev" in text

    def __lt__(self, other: FakeVersion) -> bool:
        return [int(p) for p in self.text.split("rc")[0].split(".")] < [
            int(p) for p in other.text.split("rc")[0].split(".")
        ]

    def __str__(self) -> str:
        return self.text


class FakeResponse:
    """A streamed download of ``payload``."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    def raise_for_status(self) -> None:
        """The download succeeded."""

    def iter_content(self, size: int) -> list[bytes]:
        """The payload in chunks of ``size``."""
        return [self.payload[i : i + size] for i in range(0, len(self.payload), size)]


def fake_index(
    monkeypatch: pytest.MonkeyPatch, files: dict[str, tuple[str, bytes, str]]
) -> list[str]:
    """Make fetch's index list ``files`` (name -> version, payload, sha256 promised)."""
    fetched: list[str] = []
    candidates = [
        SimpleNamespace(
            version=FakeVersion(version),
            link=SimpleNamespace(
                filename=name, hash_name="sha256", hash=promised, url_without_fragment=name
            ),
        )
        for name, (version, _, promised) in files.items()
    ]

    def get(url: str, *, stream: bool) -> FakeResponse:
        assert stream
        fetched.append(url)
        return FakeResponse(files[url][1])

    session = SimpleNamespace(get=get)
    monkeypatch.setattr(fetch_vllm_wheel, "_candidates", lambda: (candidates, session))
    return fetched


def test_newest_release_leaves_out_pre_releases(monkeypatch: pytest.MonkeyPatch) -> None:
    """The newest release is the highest version that is no pre-release, 0.9.0 below 0.10.0."""
    fake_index(
        monkeypatch,
        {
            "vllm-0.9.0.tar.gz": ("0.9.0", b"", ""),
            "vllm-0.10.0-py3-none-any.whl": ("0.10.0", b"", ""),
            "vllm-0.11.0rc1.tar.gz": ("0.11.0rc1", b"", ""),
        },
    )
    assert fetch_vllm_wheel.newest_release() == "0.10.0"
    fake_index(monkeypatch, {"vllm-0.11.0rc1.tar.gz": ("0.11.0rc1", b"", "")})
    with pytest.raises(fetch_vllm_wheel.FetchError, match="no vLLM release"):
        fetch_vllm_wheel.newest_release()


def test_the_sdist_is_kept_only_when_its_hash_is_the_index_s(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """fetch_sdist checks the index's sha256, keeps nothing on a mismatch, and reuses its file."""
    payload = b"vllm sources"
    good = hashlib.sha256(payload).hexdigest()
    fake_index(monkeypatch, {"vllm-0.34.0.tar.gz": ("0.34.0", payload, "0" * 64)})
    with pytest.raises(fetch_vllm_wheel.FetchError, match="the index says 0000"):
        fetch_vllm_wheel.fetch_sdist(tmp_path, "0.34.0")
    assert list(tmp_path.iterdir()) == []
    fetched = fake_index(monkeypatch, {"vllm-0.34.0.tar.gz": ("0.34.0", payload, good)})
    sdist = fetch_vllm_wheel.fetch_sdist(tmp_path, "0.34.0")
    assert sdist.read_bytes() == payload
    assert fetch_vllm_wheel.fetch_sdist(tmp_path, "0.34.0") == sdist
    assert fetched == ["vllm-0.34.0.tar.gz"]
    with pytest.raises(fetch_vllm_wheel.FetchError, match=r"no vllm-0\.33\.0\.tar\.gz"):
        fetch_vllm_wheel.fetch_sdist(tmp_path, "0.33.0")
