"""A newcomer's path: the README's two lines, and what the full ``tox`` needs beyond Python.

The README promises two copy-paste lines that do all the set-up on a machine with only
Python and the package index. What they and the default ``tox`` run rely on is held here
to the files that provide it: tox.ini's label, the inline plugin that skips the compiled
build without a C compiler, pyright's Node.js from the index, pre-commit hooks that need
no network, and a site preview whose links all work.
"""

from __future__ import annotations

import configparser
import importlib.util
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The README's two lines, exactly.
MAIN_JOB = "python -m pip install . && python -m verified_queue demo"
TESTS = "python -m pip install tox && python -m tox -m fast"


def _tox() -> configparser.ConfigParser:
    if not (ROOT / "tox.ini").exists():
        pytest.skip("no tox.ini here (a copy of the package alone)")
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini", encoding="utf-8")
    return tox


def test_the_readme_gives_the_two_lines() -> None:
    """The quick start is one code block of exactly the two lines, and tox has its label."""
    readme = ROOT / "README.md"
    if not readme.exists():
        pytest.skip("no README.md here")
    text = readme.read_text(encoding="utf-8")
    block = re.search(r"## Quick start\n.*?```sh\n(.*?)```", text, re.DOTALL)
    assert block is not None
    assert block[1].splitlines() == [MAIN_JOB, TESTS]
    labels = _tox()["tox"]["labels"]
    assert re.search(r"^\s*fast = tests, lint, mypy$", labels, re.MULTILINE)


def test_pyright_brings_its_own_node() -> None:
    """typing-downstream installs pyright with its nodejs extra: no Node.js needed on PATH."""
    deps = _tox()["testenv:typing-downstream"]["deps"].split()
    assert any(dep.startswith("pyright[nodejs]") for dep in deps), deps


# --- toxfile.py: the compiled build skipped without a C compiler -------------------------------


class _Skip(Exception):
    """The stand-in for tox's Skip."""


class _Fail(Exception):
    """The stand-in for tox's Fail."""


@pytest.fixture
def toxfile() -> Iterator[Any]:
    """toxfile.py, loaded with stand-ins for the parts of tox it imports."""
    path = ROOT / "toxfile.py"
    if not path.exists():
        pytest.skip("no toxfile.py here")
    plugin = types.ModuleType("tox.plugin")
    plugin.impl = lambda function: function  # type: ignore[attr-defined]
    errors = types.ModuleType("tox.tox_env.errors")
    errors.Skip = _Skip  # type: ignore[attr-defined]
    errors.Fail = _Fail  # type: ignore[attr-defined]
    stand_ins = {
        "tox": types.ModuleType("tox"),
        "tox.plugin": plugin,
        "tox.tox_env": types.ModuleType("tox.tox_env"),
        "tox.tox_env.errors": errors,
    }
    saved = {name: sys.modules.get(name) for name in stand_ins}
    sys.modules.update(stand_ins)
    try:
        spec = importlib.util.spec_from_file_location("toxfile", path)
        assert spec is not None
        assert spec.loader is not None
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        yield loaded
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _environment(name: str, skip_missing: bool) -> Any:
    """A stand-in for a tox environment: its name and the core setting the plugin reads."""
    return types.SimpleNamespace(
        conf=types.SimpleNamespace(name=name),
        core={"skip_missing_interpreters": skip_missing},
    )


def test_no_compiler_skips_the_compiled_build_in_one_line(
    toxfile: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a C compiler a compiled environment is skipped, naming what to install."""
    real = toxfile.compiler_problem
    monkeypatch.setattr(toxfile, "compiler_problem", lambda: real(which=_none))
    for name in ("compiled", "py312-compiled", "vllm-compiled", "bench-compiled"):
        with pytest.raises(_Skip) as skipped:
            toxfile.tox_on_install(_environment(name, True), None, "PythonRun", "deps")
        message = str(skipped.value)
        assert "\n" not in message
        assert "no C compiler" in message
        assert "install gcc" in message
    # CI makes a missing interpreter fail the run: a missing compiler fails it too.
    with pytest.raises(_Fail):
        toxfile.tox_on_install(_environment("compiled", False), None, "PythonRun", "deps")
    # The pure environments need no compiler.
    for name in ("tests", "py312", "vllm", "typing-downstream", "check-mode-cost"):
        toxfile.tox_on_install(_environment(name, True), None, "PythonRun", "deps")


def _none(_: str) -> None:
    return None


def test_the_compiler_is_the_one_python_builds_with(toxfile: Any) -> None:
    """CC if set, else sysconfig's CC; found on PATH, it is no problem; Windows is not checked."""
    seen: list[str] = []

    def which(program: str) -> str | None:
        seen.append(program)
        return f"/usr/bin/{program}" if program == "gcc" else None

    def config(_: str) -> str:
        return "gcc -pthread"

    assert toxfile.compiler_problem({}, config, which, "posix") is None
    problem = toxfile.compiler_problem({"CC": "clang -O2"}, config, which, "posix")
    assert problem is not None
    assert "'clang'" in problem
    assert seen == ["gcc", "clang"]
    assert toxfile.compiler_problem({}, config, _none, "nt") is None


# --- pre-commit: the lint environment's checks, offline ---------------------------------------


def test_the_pre_commit_hooks_are_local_and_run_tox_lints_checks() -> None:
    """Every hook is a local one (nothing to clone) running a command of ``tox -e lint``."""
    config = ROOT / ".pre-commit-config.yaml"
    if not config.exists():
        pytest.skip("no .pre-commit-config.yaml here")
    text = config.read_text(encoding="utf-8")
    repos = re.findall(r"^\s*- repo: (\S+)", text, re.MULTILINE)
    assert repos == ["local"]
    assert "https://" not in text
    assert set(re.findall(r"^\s*language: (\S+)", text, re.MULTILINE)) == {"system"}
    entries = re.findall(r"^\s*entry: (.+)$", text, re.MULTILINE)
    lint = [line.split()[:2] for line in _tox()["testenv:lint"]["commands"].strip().splitlines()]
    assert lint == [["ruff", "check"], ["ruff", "format"]]
    assert [entry.split()[:2] for entry in entries] == lint


# --- the site preview: one path for the build, the server and the host -------------------------


def test_the_site_is_previewed_under_the_path_it_has_on_its_host() -> None:
    """tox -e docs builds under site_url's path, and the README serves it there.

    The 404 page's links are absolute (``/verified_queue/...``): they work only where the
    site is served under that path.
    """
    mkdocs = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    url = re.search(r"^site_url: (\S+)$", mkdocs, re.MULTILINE)
    assert url is not None
    path = re.sub(r"^https?://[^/]+", "", url[1]).strip("/")
    command = _tox()["testenv:docs"]["commands"]
    assert f"--site-dir {{env_dir}}{{/}}site{{/}}{path} " in command
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "`python -m http.server -d .tox/docs/site`" in readme
    assert f"<http://localhost:8000/{path}/>" in readme


def test_each_python_environment_names_its_python() -> None:
    """``tox list`` describes py310 ... py313 (and their compiled twins) by their Python."""
    description = _tox()["testenv"]["description"]
    for minor in range(10, 14):
        lines = [
            line.strip()
            for line in description.splitlines()
            if line.strip().startswith(f"py3{minor}-")
        ]
        assert len(lines) == 2, lines  # the pure build and the compiled one
        assert all(f"on Python 3.{minor}," in line for line in lines), lines
