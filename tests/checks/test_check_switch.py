"""The process-wide switch VERIFIED_QUEUE_CHECKS, tried in fresh interpreters; off means off."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import verified_queue
from verified_queue import _switch
from verified_queue._switch import ENVIRONMENT_VARIABLE, read_check_level

ROOT = Path(__file__).resolve().parents[2]

# Runs in a fresh interpreter: reports the class the switch selected and, with checks
# on, what each misuse class raises at the operation that causes or meets it.
PROBE = """
import json, verified_queue
from verified_queue import Block, FreeBlockQueue, QueueError
from verified_queue.queue import FreeBlockQueue as Production
from verified_queue.checked import DEFAULT_FULL_CHECK_EVERY

report = {
    "level": verified_queue.CHECK_LEVEL,
    "class": type(FreeBlockQueue([Block()])).__name__,
    "exported_is_production": FreeBlockQueue is Production,
    "default_full_check_every": DEFAULT_FULL_CHECK_EVERY,
}

def attempt(action):
    try:
        action()
    except QueueError as error:
        return [type(error).__name__, getattr(error, "invariant", None)]
    return None

if verified_queue.CHECK_LEVEL != "off":
    blocks = [Block() for _ in range(6)]
    queue, other = FreeBlockQueue(blocks[:4]), FreeBlockQueue(blocks[4:])
    report["foreign remove"] = attempt(lambda: queue.remove(blocks[5]))
    report["lengths after foreign remove"] = [len(queue), len(other)]
    report["double free"] = attempt(lambda: queue.append(blocks[1]))
    blocks[0].prev_free_block = None
    report["link corruption, next popleft"] = attempt(queue.popleft)
    blocks[0].prev_free_block = queue.fake_free_list_head
    blocks[2].next_free_block = blocks[1]
    report["far corruption, next append"] = attempt(lambda: queue.append(Block()))
    blocks[2].next_free_block = blocks[3]
    queue.num_free_blocks += 1
    report["count drift, next len"] = attempt(lambda: len(queue))
print(json.dumps(report))
"""


def run_fresh(code: str, value: str | None) -> Any:
    """Run ``code`` in a fresh interpreter with the switch set to ``value`` (unset if ``None``).

    Returns what ``code`` printed, read as JSON.
    """
    environment = {k: v for k, v in os.environ.items() if k != ENVIRONMENT_VARIABLE}
    if value is not None:
        environment[ENVIRONMENT_VARIABLE] = value
    # From a neutral directory, so the installed package is imported, not the checkout.
    completed = subprocess.run(
        [sys.executable, "-c", code],
        env=environment,
        cwd=Path(__file__).anchor,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def probe(value: str | None) -> dict[str, object]:
    """Run the probe with the switch set to ``value`` (unset if ``None``); return its report."""
    report: dict[str, object] = run_fresh(PROBE, value)
    return report


@pytest.mark.parametrize("value", [None, "", "0", " 0 ", "off", "OFF"])
def test_switch_off_keeps_production_class(value: str | None) -> None:
    """Unset, empty, 0 or off: verified_queue.FreeBlockQueue is exactly the production class."""
    report = probe(value)
    assert report["level"] == "off"
    assert report["class"] == "FreeBlockQueue"
    assert report["exported_is_production"] is True


def test_switch_on_catches_each_misuse() -> None:
    """With VERIFIED_QUEUE_CHECKS=1, FreeBlockQueue(...) is checked and each misuse is caught."""
    report = probe("1")
    assert report == {
        "level": "on",
        "class": "CheckedFreeBlockQueue",
        "exported_is_production": False,
        "default_full_check_every": None,
        "foreign remove": ["NotInQueueError", None],
        "lengths after foreign remove": [4, 2],
        "double free": ["AlreadyInQueueError", None],
        "link corruption, next popleft": ["InvariantViolation", "sentinel_linkage"],
        # Out of the O(1) checks' reach at the back: left to the periodic full check.
        "far corruption, next append": None,
        "count drift, next len": ["InvariantViolation", "count_consistency"],
    }


@pytest.mark.parametrize("value", ["on", " On\n"])
def test_switch_accepts_on_as_1(value: str) -> None:
    """VERIFIED_QUEUE_CHECKS=on (the word CHECK_LEVEL reports) does exactly what 1 does."""
    assert probe(value) == probe("1")


@pytest.mark.parametrize("level", ["off", "on", "full"])
def test_check_level_round_trips(level: str) -> None:
    """Each word CHECK_LEVEL can report is an accepted value that selects that same level."""
    assert read_check_level({ENVIRONMENT_VARIABLE: level}) == level
    assert probe(level)["level"] == level


def test_switch_full_checks_every_operation() -> None:
    """With VERIFIED_QUEUE_CHECKS=full, even damage far from the operation is caught at once."""
    report = probe("full")
    assert report["level"] == "full"
    assert report["class"] == "CheckedFreeBlockQueue"
    assert report["default_full_check_every"] == 1
    assert report["far corruption, next append"] == ["InvariantViolation", "no_duplicates"]


def test_mistyped_switch_stops_import() -> None:
    """An unknown value fails the import, naming the variable and the accepted values."""
    environment = dict(os.environ, **{ENVIRONMENT_VARIABLE: "yes"})
    completed = subprocess.run(
        [sys.executable, "-c", "import verified_queue"],
        env=environment,
        cwd=Path(__file__).anchor,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode != 0
    expected = "VERIFIED_QUEUE_CHECKS='yes': expected one of '', '0', 'off', '1', 'on', 'full'"
    assert expected in completed.stderr


def test_read_check_level_maps_each_value() -> None:
    """The parser maps unset, '', '0', 'off', '1', 'on' and 'full' (any case, trimmed) to levels."""
    cases = {None: "off", "": "off", "0": "off", "1": "on", " 1\n": "on", "full": "full"}
    cases |= {"FULL": "full", "off": "off", "Off": "off", "on": "on", " ON ": "on"}
    for value, level in cases.items():
        environ = {} if value is None else {ENVIRONMENT_VARIABLE: value}
        assert read_check_level(environ) == level, value
    for bad in ("2", "true", "yes", "-1", "o n", "onn"):
        with pytest.raises(ValueError, match=ENVIRONMENT_VARIABLE):
            read_check_level({ENVIRONMENT_VARIABLE: bad})


def test_production_module_has_no_checker() -> None:
    """verified_queue/queue.py neither imports the checkers nor names any check in its code."""
    tree = ast.parse((ROOT / "verified_queue" / "queue.py").read_text(encoding="utf-8"))
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert not any(name and ("invariants" in name or "checked" in name) for name in imported)
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not any(name.startswith("check") or "Checked" in name for name in names)


def test_check_mode_does_not_import_the_trace_level() -> None:
    """checked.py imports nothing of the trace level, not even inside a function: no back edge."""
    tree = ast.parse((ROOT / "verified_queue" / "checked.py").read_text(encoding="utf-8"))
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert not any(name and "traced" in name for name in imported), imported
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not any("traced" in name.lower() for name in names), names


LOADED_CHECKERS = """
import json, sys
import verified_queue
checkers = ("verified_queue.checked", "verified_queue.invariants", "verified_queue._diagnosis")
before = sorted(name for name in checkers if name in sys.modules)
verified_queue.CheckedFreeBlockQueue  # the first use loads check mode
after = sorted(name for name in checkers if name in sys.modules)
print(json.dumps([before, after]))
"""


@pytest.mark.parametrize(
    ("value", "loaded_at_import"), [(None, False), ("off", False), ("1", True)]
)
def test_check_mode_is_loaded_only_when_used(value: str | None, loaded_at_import: bool) -> None:
    """With checks off, importing the package loads no checker; the first use loads them all."""
    before, after = run_fresh(LOADED_CHECKERS, value)
    every_checker = [
        "verified_queue._diagnosis",
        "verified_queue.checked",
        "verified_queue.invariants",
    ]
    assert before == (every_checker if loaded_at_import else [])
    assert after == every_checker


USED_CHECKED = """
import json, sys
import verified_queue
from verified_queue import Block
queue = verified_queue.CheckedFreeBlockQueue([Block(), Block()])
queue.append(queue.popleft())
queue.full_check()
print(json.dumps([type(queue).__name__, "verified_queue.traced" in sys.modules]))
"""


@pytest.mark.parametrize(
    ("value", "traced_loaded"), [(None, False), ("1", False), ("full", False), ("trace", True)]
)
def test_the_checked_class_is_check_mode_at_every_level(
    value: str | None, traced_loaded: bool
) -> None:
    """CheckedFreeBlockQueue builds itself whatever the switch says; only trace loads the trace."""
    assert run_fresh(USED_CHECKED, value) == ["CheckedFreeBlockQueue", traced_loaded]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["python", "-m", "verified_queue", "demo"], True),
        (["python", "-X", "dev", "-m", "verified_queue"], True),
        (["python", "-m", "verified_queue.cli"], False),
        (["python", "-m", "pytest", "verified_queue"], False),
        (["python", "-m"], False),
        (["python", "-c", "import verified_queue"], False),
        ([], False),
    ],
)
def test_the_command_is_told_from_its_own_argv(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], expected: bool
) -> None:
    """``python -m verified_queue``, options before ``-m`` or not; no other command is it."""
    monkeypatch.setattr(sys, "orig_argv", argv)
    assert _switch._run_as_command() is expected


def test_without_orig_argv_the_process_is_not_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """An interpreter without ``sys.orig_argv`` is taken for a program, never the command."""
    monkeypatch.delattr(sys, "orig_argv", raising=False)
    assert _switch._run_as_command() is False


def test_a_bad_switch_is_a_value_error_in_a_program_and_exit_2_in_the_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Read at import: a program gets the ValueError, the command one line and status 2."""
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, "bogus")
    monkeypatch.setattr(sys, "orig_argv", ["python", "-c", "import verified_queue"])
    with pytest.raises(ValueError, match="VERIFIED_QUEUE_CHECKS='bogus': expected one of"):
        _switch._level_or_exit()
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "verified_queue", "demo"])
    with pytest.raises(SystemExit) as stopped:
        _switch._level_or_exit()
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (
        "python -m verified_queue: error: VERIFIED_QUEUE_CHECKS='bogus': expected one of "
        "'', '0', 'off', '1', 'on', 'full', 'trace'\n"
    )
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, " Full ")
    assert _switch._level_or_exit() == "full"


def test_a_missing_name_of_the_package_is_the_attribute_error_python_words() -> None:
    """The lazy loader answers only for its two classes; any other name is Python's own error."""
    with pytest.raises(AttributeError) as missing:
        _ = verified_queue.CheckedFreeBlockQueu
    assert str(missing.value) == "module 'verified_queue' has no attribute 'CheckedFreeBlockQueu'"
    assert "TracedFreeBlockQueue" in dir(verified_queue)
