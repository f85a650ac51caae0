"""The runner of vLLM's own tests (tox -e vllm-engine): its comparison and its set-up, no vLLM."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from conformance import engine

SHIPPED_QUEUE = engine.MODES["shipped"][1]


def report(queue: str, outcomes: dict[str, str], excluded: dict[str, str]) -> dict[str, Any]:
    """A run's report as the pytest plugin writes it."""
    return {"queue": queue, "outcomes": outcomes, "excluded": excluded}


def three_runs(**changes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Three agreeing runs, with ``changes`` merged into the named modes' reports."""
    outcomes = {"a.py::test_one": "passed", "a.py::test_two": "skipped", "b.py::x": "excluded"}
    excluded = {"b.py::x": "needs the Hugging Face config of llava, not on disk"}
    reports = {
        mode: report(queue, dict(outcomes), dict(excluded))
        for mode, (_, queue) in engine.MODES.items()
    }
    for mode, change in changes.items():
        reports[mode].update(change)
    return reports


def test_agreeing_runs_pass() -> None:
    """Same outcome per test, same exclusions, each mode's queue: no problem reported."""
    assert engine.compare(three_runs()) == []


@pytest.mark.parametrize(
    ("mode", "change", "expected"),
    [
        ("checked", {"outcomes": {"a.py::test_one": "failed"}}, "checked: a.py::test_one: failed"),
        ("production", {"queue": SHIPPED_QUEUE}, "production: BlockPool built"),
        ("checked", {"excluded": {}}, "checked: the excluded tests"),
        ("shipped", {"outcomes": {"a.py::test_one": "failed"}}, "shipped: a.py::test_one failed"),
        ("shipped", {"outcomes": {"a.py::t": "skipped"}}, "shipped: no test passed"),
    ],
    ids=["a mode fails a test", "plugin not loaded", "exclusions differ", "red as shipped", "none"],
)
def test_each_disagreement_is_reported(mode: str, change: dict[str, Any], expected: str) -> None:
    """A test whose outcome moves, a queue not swapped, other exclusions or a red baseline fail."""
    problems = engine.compare(three_runs(**{mode: change}))
    assert any(problem.startswith(expected) for problem in problems), problems


def test_the_hub_cache_holds_opt_125m_config(tmp_path: Path) -> None:
    """The offline Hugging Face cache names one snapshot holding opt-125m's config.json."""
    home = engine._hub_cache(tmp_path)
    model = home / "hub" / "models--facebook--opt-125m"
    revision = (model / "refs" / "main").read_text(encoding="utf-8")
    config = json.loads((model / "snapshots" / revision / "config.json").read_text("utf-8"))
    assert config["model_type"] == "opt"
    assert config["architectures"] == ["OPTForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"]) == (768, 12)


def test_only_the_tests_and_pyproject_leave_the_sdist(tmp_path: Path) -> None:
    """Extraction takes tests/ and pyproject.toml out of the sdist, once, and nothing else."""
    sdist = tmp_path / "vllm-9.9.9.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        for name in ("tests/test_a.py", "pyproject.toml", "vllm/core.py", "setup.py"):
            data = f"# {name}\n".encode()
            member = tarfile.TarInfo(f"vllm-9.9.9/{name}")
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    root = engine._extract_tests(tmp_path, "9.9.9")
    found = sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())
    assert found == [".extracted", "pyproject.toml", "tests/test_a.py"]
    sdist.unlink()  # a second call reuses the extraction, and needs no sdist
    assert engine._extract_tests(tmp_path, "9.9.9") == root


def test_the_own_tests_are_copied_beside_a_configuration_of_their_own(tmp_path: Path) -> None:
    """This repository's tests on vLLM, and what they load, are copied beside a pytest.ini."""
    folder = engine._own_tests_path(tmp_path)
    assert sorted(path.name for path in folder.iterdir()) == sorted(
        [*engine.OWN_TEST_FILES, "pytest.ini"]
    )
    source = Path(engine.__file__).resolve().parents[1] / "tests" / "vllm"
    for name in engine.OWN_TEST_FILES:
        assert (folder / name).read_text("utf-8") == (source / name).read_text("utf-8")


@pytest.mark.parametrize(
    ("body", "passes"),
    [
        ("def test_it():\n    pass\n", True),
        ("import pytest\n\ndef test_it():\n    pytest.skip('no vLLM')\n", False),
        ("def test_it():\n    assert False\n", False),
    ],
    ids=["passed", "skipped", "failed"],
)
def test_only_passing_own_tests_pass_the_run(tmp_path: Path, body: str, passes: bool) -> None:
    """The engine run fails on an own test that fails or skips (no vLLM, no plugin mode)."""
    tests = tmp_path / "tests"
    tests.mkdir()
    for name in engine.OWN_TEST_FILES:
        (tests / name).write_text(body if name.startswith("test_") else "", encoding="utf-8")
    folder = engine._own_tests_path(tmp_path / "cache", tests)
    problem = engine._run_own_test(folder, tmp_path / "hf-home", "test_engine_pool.py", "checked")
    assert (problem is None) == passes, problem


def test_each_own_test_runs_in_each_of_its_modes_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool test as shipped, checked and trace, the trace test in trace; only modes asked."""
    runs: list[tuple[str, str]] = []

    def record(directory: Path, home: Path, test: str, mode: str) -> str | None:
        del directory, home
        runs.append((test, mode))
        return f"{test} {mode}" if mode == "checked" else None

    monkeypatch.setattr(engine, "_run_own_test", record)
    problems = engine._run_own_tests(tmp_path, tmp_path / "hf-home", ["shipped", "checked"])
    assert runs == [("test_engine_pool.py", "shipped"), ("test_engine_pool.py", "checked")]
    assert problems == ["test_engine_pool.py checked"]
    runs.clear()
    engine._run_own_tests(tmp_path, tmp_path / "hf-home", list(engine.MODES))
    assert runs == [
        ("test_engine_trace.py", "trace"),
        ("test_engine_pool.py", "shipped"),
        ("test_engine_pool.py", "checked"),
        ("test_engine_pool.py", "trace"),
    ]
