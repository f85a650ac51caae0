"""The wheels pip installs: the compiled ones cibuildwheel builds, the pure fallback, the docs.

pyproject.toml's ``[tool.cibuildwheel]`` says which wheels are built and how each is tested;
``.github/workflows/wheels.yml`` runs it on a runner per architecture and builds the sdist and
the pure wheel; ``tox -e wheel-manylinux`` builds and tests one Linux wheel the same way on a
developer's machine. These tests hold the three to the same set of wheels and the same test
run as tox's, and the install instructions to the package's distribution name.
"""

from __future__ import annotations

import configparser
import fnmatch
import importlib
import itertools
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "wheels.yml"

#: The Pythons the project tests and builds compiled wheels for.
PYTHONS = ("cp310", "cp311", "cp312", "cp313")

#: The platforms of the compiled wheels, as cibuildwheel names them in its identifiers.
PLATFORMS = (
    "manylinux_x86_64",
    "manylinux_aarch64",
    "musllinux_x86_64",
    "musllinux_aarch64",
    "macosx_x86_64",
    "macosx_arm64",
    "win_amd64",
)

#: Each GitHub-hosted runner the workflow may use, and the platforms its native architecture
#: builds (``archs = ["native"]``: each runner builds its own architecture only).
RUNNER_PLATFORMS = {
    "ubuntu-latest": {"manylinux_x86_64", "musllinux_x86_64"},
    "ubuntu-24.04-arm": {"manylinux_aarch64", "musllinux_aarch64"},
    "macos-15-intel": {"macosx_x86_64"},
    "macos-latest": {"macosx_arm64"},
    "windows-latest": {"win_amd64"},
}

#: Identifiers cibuildwheel knows beyond the wanted ones: other Pythons (older, newer,
#: free-threaded, PyPy, GraalPy) and other platforms (32-bit, other architectures, universal2,
#: Windows on Arm, WebAssembly, mobile).
OTHER_PYTHONS: tuple[str, ...] = (
    *("cp38", "cp39", "cp314", "cp315", "cp313t", "cp314t", "cp315t"),
    *("pp310", "pp311", "gp312_250", "gp313_253"),
)
LINUX_ARCHS = ("x86_64", "i686", "aarch64", "ppc64le", "s390x", "armv7l", "riscv64")
ALL_PLATFORMS: tuple[str, ...] = (
    *(f"{libc}_{arch}" for libc in ("manylinux", "musllinux") for arch in LINUX_ARCHS),
    *("macosx_x86_64", "macosx_arm64", "macosx_universal2"),
    *("win32", "win_amd64", "win_arm64", "pyodide_wasm32"),
    *("android_arm64_v8a", "android_x86_64", "ios_arm64_iphoneos"),
)


def _toml(path: Path) -> dict[str, Any]:
    # tomllib is Python 3.11+; on 3.10 pytest depends on its backport, tomli.
    tomllib = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")
    with path.open("rb") as file:
        loaded: dict[str, Any] = tomllib.load(file)
    return loaded


def _cibuildwheel() -> dict[str, Any]:
    config: dict[str, Any] = _toml(ROOT / "pyproject.toml")["tool"]["cibuildwheel"]
    return config


def _workflow() -> str:
    if not WORKFLOW.exists():
        pytest.skip("no .github/workflows/wheels.yml here (a copy of the package alone)")
    return WORKFLOW.read_text(encoding="utf-8")


def _tox() -> configparser.ConfigParser:
    if not (ROOT / "tox.ini").exists():
        pytest.skip("no tox.ini here (a copy of the package alone)")
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini", encoding="utf-8")
    return tox


def _words(value: str | list[str]) -> list[str]:
    """An option that cibuildwheel takes as a space-separated string or as a list."""
    return value.split() if isinstance(value, str) else [w for item in value for w in item.split()]


def _expand_braces(pattern: str) -> list[str]:
    """Shell-like brace expansion, which cibuildwheel's selectors have before fnmatch."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [
        expanded
        for option in match[1].split(",")
        for expanded in _expand_braces(head + option + tail)
    ]


def _matches(patterns: list[str], identifier: str) -> bool:
    return any(
        fnmatch.fnmatchcase(identifier, expanded)
        for pattern in patterns
        for expanded in _expand_braces(pattern)
    )


def _selected(config: dict[str, Any]) -> set[str]:
    """Which identifiers of the known ones the build and skip selectors let through."""
    build = _words(config.get("build", "*"))
    skip = _words(config.get("skip", ""))
    everything = itertools.product(PYTHONS + OTHER_PYTHONS, ALL_PLATFORMS)
    return {
        identifier
        for identifier in (f"{python}-{platform}" for python, platform in everything)
        if _matches(build, identifier) and not _matches(skip, identifier)
    }


def _runners(workflow: str) -> list[str]:
    """The ``os`` list of the compiled job's matrix."""
    job = workflow.split("\n  compiled:\n", 1)
    assert len(job) == 2, "wheels.yml has no `compiled` job"
    runners = re.search(r"^\s+os: \[([^\]]*)\]", job[1], re.MULTILINE)
    assert runners is not None, "the compiled job has no `os: [...]` matrix"
    return [runner.strip() for runner in runners[1].split(",")]


def test_the_selectors_pick_cpython_310_to_313_on_the_seven_platforms() -> None:
    """build and skip let through exactly CPython 3.10 to 3.13 on the seven wheel platforms."""
    wanted = {f"{python}-{platform}" for python in PYTHONS for platform in PLATFORMS}
    assert len(wanted) == 28
    assert _selected(_cibuildwheel()) == wanted


def test_the_selector_check_refuses_a_wider_selection() -> None:
    """The check above sees a selector that would also build 3.14, free-threaded or 32-bit."""
    for build in ("cp31*-*", "cp3*-manylinux_*", "*"):
        assert _selected({"build": build}) != _selected(_cibuildwheel())
    assert "cp313-win32" in _selected({"build": "cp313-*"})
    assert "cp314t-win_amd64" in _selected({"build": "cp31{3,4t}-win_amd64"})
    assert "cp310-win_amd64" not in _selected({"build": "cp31[0-3]-*", "skip": "*-win_amd64"})


def test_each_wheel_is_compiled_and_tested_as_tox_tests_it() -> None:
    """mypyc on, the test group installed, the wheel refused if pure, then tox's suite run."""
    config = _cibuildwheel()
    environment = config["environment"]
    assert isinstance(environment, dict), "environment as a table, so that this test can read it"
    assert environment["HATCH_BUILD_HOOK_ENABLE_MYPYC"] == "1"
    assert _words(config["test-groups"]) == ["test"]
    commands = config["test-command"]
    assert isinstance(commands, list)
    assert commands[0] == "python -I {project}/.ci/require_compiled.py"
    assert (ROOT / ".ci" / "require_compiled.py").exists()
    # tox's run of the suite, word for word, then the checkout's tests: cibuildwheel runs the
    # command from a temporary directory, where a bare `tests` would find nothing.
    tox_run = shlex.split(_tox()["testenv"]["commands"].replace("{posargs}", ""))
    pytest_run = shlex.split(commands[-1])
    assert pytest_run[: len(tox_run)] == tox_run
    assert pytest_run[-1] == "{project}/tests"
    assert len(commands) == 2


def test_the_workflow_has_a_runner_for_each_platform() -> None:
    """wheels.yml runs cibuildwheel on Linux, macOS and Windows, one runner per architecture."""
    workflow = _workflow()
    assert re.search(r"^\s+- uses: pypa/cibuildwheel@v\d", workflow, re.MULTILINE)
    runners = _runners(workflow)
    assert {runner.split("-")[0] for runner in runners} == {"ubuntu", "macos", "windows"}
    unknown = [runner for runner in runners if runner not in RUNNER_PLATFORMS]
    assert not unknown, f"add the platforms each of {unknown} builds natively to this test"
    built = [platform for runner in runners for platform in RUNNER_PLATFORMS[runner]]
    assert sorted(built) == sorted(PLATFORMS)
    # Native builds only: a runner building another architecture would test it under emulation.
    assert _words(_cibuildwheel()["archs"]) == ["native"]


def test_the_workflow_leaves_the_options_to_pyproject() -> None:
    """No CIBW_ variable in wheels.yml overrides pyproject.toml, the one place of the options."""
    assert "CIBW_" not in _workflow()


def test_the_workflow_counts_every_compiled_wheel() -> None:
    """The final job expects as many compiled wheels as the selectors pick, and the pure one."""
    workflow = _workflow()
    count = re.search(
        r"ls dist/\*-cp31\[0-3\]-cp31\[0-3\]-\*\.whl \| wc -l\)\" -eq (\d+)", workflow
    )
    assert count is not None
    assert int(count[1]) == len(_selected(_cibuildwheel()))
    assert 'ls dist/*-py3-none-any.whl | wc -l)" -eq 1' in workflow


def test_the_workflow_builds_the_pure_wheel_without_mypyc() -> None:
    """The pure job runs ``python -m build`` with the mypyc hook off and uploads what it built."""
    workflow = _workflow()
    pure = workflow.split("\n  pure:\n", 1)
    assert len(pure) == 2, "wheels.yml has no `pure` job"
    job = pure[1].split("\n  all:\n", 1)[0]
    assert "- run: python -m build\n" in job
    assert not re.search(r"HATCH_BUILD_HOOKS?_ENABLE\w*\s*[:=]", job), "the hook is set on"
    assert "py3-none-any.whl" in job
    assert "path: dist/*" in job


def test_tox_builds_repairs_and_tests_a_manylinux_wheel_in_a_fresh_venv() -> None:
    """wheel-manylinux: compiled, repaired by auditwheel, installed alone in a new venv, tested."""
    tox = _tox()
    assert "wheel-manylinux" not in tox["tox"]["env_list"].replace("\n", " ").split(", ")
    env = tox["testenv:wheel-manylinux"]
    assert env["set_env"].split() == ["HATCH_BUILD_HOOK_ENABLE_MYPYC", "=", "1"]
    assert env["skip_install"] == "true"
    commands = [shlex.split(line) for line in env["commands"].strip().splitlines()]
    programs = [command[:2] for command in commands]
    assert ["auditwheel", "repair"] in programs
    assert ["auditwheel", "show"] in programs
    assert ["python", "-m"] in programs
    venv_python = "{env_tmp_dir}{/}venv{/}bin{/}python"
    assert ["python", "-m", "venv", "{env_tmp_dir}{/}venv"] in commands
    installs = [
        command for command in commands if command[:4] == [venv_python, "-m", "pip", "install"]
    ]
    assert any("{env_tmp_dir}{/}wheelhouse" in command for command in installs)
    assert any("--group" in command for command in installs)
    assert [venv_python, "-I", "{tox_root}{/}.ci{/}require_compiled.py"] in commands
    tox_run = shlex.split(tox["testenv"]["commands"].replace("{posargs}", ""))
    assert commands[-1][:3] == [venv_python, "-m", "pytest"]
    assert commands[-1][2 : 2 + len(tox_run)] == tox_run
    assert "{tox_root}{/}tests" in commands[-1]
    assert env["change_dir"] == "{env_tmp_dir}"


def test_the_install_instructions_use_the_distribution_name() -> None:
    """Every name of the package pip is given in README.md and docs/vllm.md is pyproject's."""
    name = _toml(ROOT / "pyproject.toml")["project"]["name"]
    command = r"(?:pip install(?: --[\w-]+)*|--no-binary[ =])\s*"
    for page in (ROOT / "README.md", ROOT / "docs" / "vllm.md"):
        if not page.exists():
            continue
        text = page.read_text(encoding="utf-8")
        given = re.findall(command + r"(verified[-_.]?queue[\w.-]*)", text, re.IGNORECASE)
        assert given, f"{page.name} installs the package from an index nowhere"
        assert set(given) == {name}, (page.name, given)
        # The one way to refuse the compiled wheel where one fits: build the sdist, pure.
        assert f"--no-binary {name} {name}" in text, page.name
