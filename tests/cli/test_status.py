"""``verified_queue.status()`` and ``python -m verified_queue status``: what is in force.

The plugin's rebindings on a stand-in vLLM are in ``tests/vllm/test_plugin.py``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import types

import pytest

import verified_queue
from verified_queue import _status
from verified_queue.__main__ import main
from verified_queue.cli import status as status_command


def _run(code: str, **environment: str) -> str:
    """Run ``code`` in a fresh interpreter with ``environment`` added; return its stdout."""
    env = {**os.environ, **environment}
    for name in ("VERIFIED_QUEUE_CHECKS", "VERIFIED_QUEUE_VLLM"):
        if name not in environment:
            env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


def test_status_names_the_build_and_the_class_in_force() -> None:
    """status() reports the version, the build, the check level and what FreeBlockQueue names."""
    found = verified_queue.status()
    assert found.version == verified_queue.__version__
    assert found.compiled is verified_queue.COMPILED
    assert found.check_level == verified_queue.CHECK_LEVEL
    bound = verified_queue.FreeBlockQueue
    assert found.free_block_queue == f"{bound.__module__}.{bound.__qualname__}"
    assert found.vllm_mode == "off"
    assert found.vllm_rebound == ()
    text = str(found)
    build = "compiled (mypyc)" if verified_queue.COMPILED else "pure Python"
    assert text.splitlines()[0] == f"verified_queue {verified_queue.__version__}, {build} build"
    assert f"verified_queue.FreeBlockQueue is {found.free_block_queue}" in text
    assert "vLLM plugin: nothing rebound in this process" in text


def test_status_reports_the_build_the_package_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """The build is read from the package when asked: a compiled one is reported so."""
    monkeypatch.setattr(verified_queue, "COMPILED", True)
    found = verified_queue.status()
    assert found.compiled is True
    assert str(found).splitlines()[0].endswith(", compiled (mypyc) build")


def test_loaded_vllm_modules_are_vllm_and_its_submodules_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``vllm`` and ``vllm.*`` count, in load order; ``vllm_*`` and a ``None`` entry do not.

    Other modules of vLLM's that tests before this one loaded are left out of the comparison.
    """
    for name in ("vllm", "vllm_plugins", "vllm.v1", "vllm.absent"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    top, extension, core = (types.ModuleType(name) for name in ("vllm", "vllm_plugins", "vllm.v1"))
    monkeypatch.setitem(sys.modules, "vllm", top)
    monkeypatch.setitem(sys.modules, "vllm_plugins", extension)
    monkeypatch.setitem(sys.modules, "vllm.absent", None)  # as a failed import leaves it
    monkeypatch.setitem(sys.modules, "vllm.v1", core)
    ours = (top, extension, core)
    found = _status.loaded_vllm_modules()
    assert [module for module in found if module in ours] == [top, core]
    assert None not in found


@pytest.mark.parametrize(
    ("level", "bound"),
    [
        ("off", "verified_queue.queue.FreeBlockQueue"),
        ("1", "verified_queue.checked.CheckedFreeBlockQueue"),
        ("trace", "verified_queue.traced.TracedFreeBlockQueue"),
    ],
)
def test_status_follows_the_check_switch_and_loads_nothing(level: str, bound: str) -> None:
    """In a fresh process: the level read at import, and neither check mode nor plugin loaded."""
    code = (
        "import json, sys, verified_queue\n"
        "s = verified_queue.status()\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('verified_queue.checked',"
        " 'verified_queue.vllm', 'vllm')))\n"
        "print(json.dumps([s.check_level, s.free_block_queue, s.vllm_mode, loaded]))\n"
    )
    level_name, name, mode, loaded = json.loads(_run(code, VERIFIED_QUEUE_CHECKS=level))
    assert (level_name, name, mode) == ({"1": "on"}.get(level, level), bound, "off")
    if level == "off":
        assert loaded == []  # check mode is loaded only when the switch asks for it
    else:
        assert "verified_queue.checked" in loaded
    assert not [module for module in loaded if "vllm" in module]


def test_importing_the_package_loads_neither_check_mode_nor_the_status_module() -> None:
    """The package stays lazy: status and the checkers load on first use only."""
    code = (
        "import sys, verified_queue\n"
        "print(sorted(m for m in sys.modules if m.startswith('verified_queue.')))\n"
    )
    loaded = _run(code)
    for lazy in ("_status", "checked", "traced", "vllm", "invariants"):
        assert f"'verified_queue.{lazy}" not in loaded


def test_dir_lists_the_api_and_no_stray_import() -> None:
    """dir(verified_queue): the API (lazy classes included) and submodules, no helper imports."""
    names = dir(verified_queue)
    for stray in ("Path", "TYPE_CHECKING", "annotations", "warnings", "typing"):
        assert stray not in names
    public = {name for name in names if not name.startswith("_")}
    submodules = {name for name in public if type(getattr(verified_queue, name)) is type(sys)}
    assert public - submodules == set(verified_queue.__all__) - {"__version__"}
    assert "CheckedFreeBlockQueue" in names  # loaded lazily, listed all the same


def test_the_plugin_finder_mark_is_the_plugins() -> None:
    """The plugin marks its finder with the attribute status() looks for."""
    from verified_queue.vllm import plugin  # noqa: PLC0415 -- the plugin is loaded on purpose

    assert getattr(plugin._RebindingFinder, _status.FINDER_MARK) is True
    assert _status.is_plugin_finder(plugin._RebindingFinder(None))
    assert not _status.is_plugin_finder(object())


def test_the_status_command_prints_the_status_and_the_vllm_outlook(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``status`` prints the banner, the status without its first line, and vLLM's outlook."""
    monkeypatch.setenv("VERIFIED_QUEUE_VLLM", "checked")
    assert main(["status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    build = "compiled (mypyc)" if verified_queue.COMPILED else "pure Python"
    assert lines[0] == f"verified_queue {verified_queue.__version__} ({build})"
    assert lines[1:3] == str(verified_queue.status()).splitlines()[1:]
    assert lines[3].startswith("vLLM: ")
    assert "the plugin is registered (verified_queue.vllm.plugin:register)" in lines[3]
    assert lines[4] == (
        "vLLM: a vLLM process started from here rebinds its FreeKVCacheBlockQueue "
        "(VERIFIED_QUEUE_VLLM=checked)"
    )


def test_the_status_command_names_a_refused_plugin_value(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A VERIFIED_QUEUE_VLLM the plugin would refuse is reported with the plugin's own words."""
    monkeypatch.setenv("VERIFIED_QUEUE_VLLM", "yes")
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "a vLLM process started from here stops: VERIFIED_QUEUE_VLLM='yes': expected" in out


class _Entry:
    """An entry point as ``importlib.metadata.entry_points`` lists it: only its value is read."""

    def __init__(self, value: str) -> None:
        self.value = value


@pytest.mark.parametrize(
    ("version", "spec", "expected"),
    [("0.34.0", None, "0.34.0"), (None, "a spec", "unknown"), (None, None, None)],
    ids=["with metadata", "importable, no metadata", "absent"],
)
def test_vllms_version_is_read_from_its_metadata_or_said_unknown(
    monkeypatch: pytest.MonkeyPatch, version: str | None, spec: object, expected: str | None
) -> None:
    """The version from vLLM's metadata; ``unknown`` if only the module is there; else None."""

    def metadata_version(name: str) -> str:
        if name != "vllm" or version is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return version

    monkeypatch.setattr(importlib.metadata, "version", metadata_version)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec if name == "vllm" else None)
    assert status_command._vllm_version() == expected


@pytest.mark.parametrize(
    ("version", "entries", "mode", "expected"),
    [
        (
            "0.34.0",
            ["verified_queue.vllm.plugin:register"],
            "checked",
            [
                "vLLM: 0.34.0 installed; the plugin is registered "
                "(verified_queue.vllm.plugin:register)",
                "vLLM: a vLLM process started from here rebinds its FreeKVCacheBlockQueue "
                "(VERIFIED_QUEUE_VLLM=checked)",
            ],
        ),
        (
            None,
            ["someone.else:register"],
            "off",
            [
                "vLLM: not installed; the plugin is not registered "
                "(verified_queue is not installed as a distribution)",
                "vLLM: a vLLM process started from here rebinds nothing "
                "(VERIFIED_QUEUE_VLLM unset or off)",
            ],
        ),
    ],
    ids=["installed, registered, checked", "absent, unregistered, off"],
)
def test_the_vllm_lines_say_what_a_vllm_process_would_get(
    monkeypatch: pytest.MonkeyPatch,
    version: str | None,
    entries: list[str],
    mode: str,
    expected: list[str],
) -> None:
    """Installed or not, registered or not, and what the mode in force makes a vLLM process do."""
    monkeypatch.setattr(status_command, "_vllm_version", lambda: version)
    monkeypatch.setattr(
        importlib.metadata,
        "entry_points",
        lambda group: (
            [_Entry(value) for value in entries] if group == "vllm.general_plugins" else []
        ),
    )
    monkeypatch.setenv("VERIFIED_QUEUE_VLLM", mode)
    assert status_command.describe_vllm() == expected


def test_a_bad_vllm_mode_is_said_to_stop_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    """A value the plugin refuses is reported as what it does: the vLLM process stops."""
    monkeypatch.setenv("VERIFIED_QUEUE_VLLM", "bogus")
    line = status_command.describe_vllm()[1]
    assert line.startswith("vLLM: a vLLM process started from here stops: ")
    assert "bogus" in line


class _MarkLookupFails(type):
    """A metaclass whose classes raise when asked for the plugin's finder mark."""

    def __getattribute__(cls, name: str) -> object:
        if name == _status.FINDER_MARK:
            raise RuntimeError("no attributes here")
        return super().__getattribute__(name)


def test_a_finder_whose_class_cannot_be_asked_is_not_the_plugins() -> None:
    """A finder on sys.meta_path whose class raises on the mark's lookup is someone else's:
    the status names no plugin for it, and does not fail."""
    odd_finder = _MarkLookupFails("OddFinder", (), {})()
    assert _status.is_plugin_finder(odd_finder) is False


def test_a_rebound_name_is_written_as_a_dotted_class_or_its_repr() -> None:
    """A class is written ``module.QualName``; anything else a vLLM name may hold, by repr."""
    assert _status._name(_status.FINDER_MARK.__class__) == "builtins.str"
    assert _status._name(None) == "None"
    assert _status._name(7) == "7"
