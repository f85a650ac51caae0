"""The CrossHair contracts of ``specs.contracts``: true of the queue, false of every planted bug.

CrossHair itself runs in the ``crosshair`` tox environment (the real queue; any counterexample
fails it) and, over every planted bug, in ``crosshair-planted``, which sets
``VERIFIED_QUEUE_CROSSHAIR_PLANTED=1`` to enable :func:`test_crosshair_reports_every_planted_bug`.
The other tests evaluate the same ``pre:``/``post:`` conditions concretely, on every input of
each contract's small domain, so the default run already shows the contracts hold of the queue
and are not vacuous.
"""

from __future__ import annotations

import inspect
import itertools
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from specs import contracts
from specs.bug_matrix import MISSES
from specs.planted_bugs import PLANTED_BUGS
from verified_queue.queue import FreeBlockQueue

ROOT = Path(__file__).resolve().parent.parent

#: The planted bugs each run must report: all but those specs.bug_matrix.MISSES explains.
CONTRACT_BUGS = sorted(set(PLANTED_BUGS) - {bug for layer, bug in MISSES if layer == "contracts"})
CROSSHAIR_BUGS = sorted(set(PLANTED_BUGS) - {bug for layer, bug in MISSES if layer == "crosshair"})
CODES = range(contracts.FOREIGN, contracts.UNIVERSE)
SIZES = range(contracts.UNIVERSE + 1)


def _conditions(function: Callable[..., object], kind: str) -> list[str]:
    """The ``pre:`` or ``post:`` expressions of a PEP 316 docstring."""
    prefix = f"{kind}:"
    lines = (line.strip() for line in (function.__doc__ or "").splitlines())
    return [line[len(prefix) :].strip() for line in lines if line.startswith(prefix)]


def _domain(function: Callable[..., object]) -> Iterator[tuple[Any, ...]]:
    """Every input of the contract's domain (a superset: the ``pre:`` conditions filter it)."""
    name = function.__name__
    if name == "popleft_contract":
        yield from ((size,) for size in SIZES)
    elif name == "popleft_n_contract":
        yield from itertools.product(SIZES, range(-3, contracts.UNIVERSE + 3))
    elif name in {"remove_contract", "append_contract", "queries_contract"}:
        yield from itertools.product(SIZES, CODES)
    elif name == "iter_blocks_after_contract":
        yield from itertools.product(SIZES, [contracts.NONE, *CODES])
    elif name in {"append_n_contract", "prepend_n_contract"}:
        for length in range(3):
            for batch in itertools.product(CODES, repeat=length):
                yield from ((size, list(batch)) for size in SIZES)
    elif name == "construct_contract":
        for length in range(contracts.UNIVERSE + 1):
            yield from ((list(batch),) for batch in itertools.product(SIZES[:-1], repeat=length))
    elif name == "operations_contract":
        instructions = list(itertools.product(range(7), range(-4, contracts.UNIVERSE)))
        for length in range(3):
            for program in itertools.product(instructions, repeat=length):
                yield from ((size, list(program)) for size in SIZES)
    else:
        raise LookupError(f"no domain for {name}")


CONTRACTS = [
    function
    for name, function in inspect.getmembers(contracts, inspect.isfunction)
    if name.endswith("_contract") and function.__module__ == contracts.__name__
]


def _failures(function: Callable[..., object], *, first: bool = False) -> tuple[int, list[str]]:
    """Evaluate the contract on its domain: (inputs checked, failed conditions).

    With ``first``, stop at the first input on which a condition fails.
    """
    parameters = list(inspect.signature(function).parameters)
    checked = 0
    failed: list[str] = []
    for arguments in _domain(function):
        namespace: dict[str, Any] = {
            **vars(contracts),
            **dict(zip(parameters, arguments, strict=True)),
        }
        if not all(eval(condition, namespace) for condition in _conditions(function, "pre")):
            continue
        checked += 1
        try:
            namespace["_"] = namespace["__return__"] = function(*arguments)
        except Exception as error:  # CrossHair reports an escaping exception as a failure too
            failed.append(f"{function.__name__}{arguments} raised {error!r}")
            if first:
                break
            continue
        failed.extend(
            f"{function.__name__}{arguments}: {condition}"
            for condition in _conditions(function, "post")
            if not eval(condition, namespace)
        )
        if first and failed:
            break
    return checked, failed


def test_every_contract_has_conditions() -> None:
    """Each contract function states preconditions and postconditions for CrossHair."""
    assert len(CONTRACTS) == 10
    for function in CONTRACTS:
        assert _conditions(function, "pre"), function.__name__
        assert _conditions(function, "post"), function.__name__


@pytest.mark.parametrize("function", CONTRACTS, ids=lambda function: function.__name__)
def test_contract_holds_on_its_whole_domain(function: Callable[..., object]) -> None:
    """Every postcondition holds of the real queue on every input its preconditions admit."""
    checked, failed = _failures(function)
    assert checked > 0
    assert failed == []


@pytest.mark.parametrize("bug", CONTRACT_BUGS)
def test_contracts_reject_planted_bug(bug: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Some postcondition fails on some input for every planted bug."""
    monkeypatch.setattr(contracts, "QUEUE_TYPE", PLANTED_BUGS[bug])
    failed = [failure for function in CONTRACTS for failure in _failures(function, first=True)[1]]
    assert failed, f"no contract notices {bug}"


def test_contracts_call_every_public_operation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Across their domains the single-operation contracts call every public method of the queue.

    The harness, ``operations_contract``, is left out: it only combines the same operations.
    """
    called: set[str] = set()
    public = {
        "__init__",
        "__len__",
        "__bool__",
        "__iter__",
        "__contains__",
        "popleft",
        "popleft_n",
        "remove",
        "append",
        "append_n",
        "prepend_n",
        "iter_blocks_after",
        "get_all_free_blocks",
    }

    def spy(name: str) -> Callable[..., object]:
        original = getattr(FreeBlockQueue, name)

        def recorded(*args: object, **kwargs: object) -> object:
            called.add(name)
            return original(*args, **kwargs)

        return recorded

    spying = type("SpyQueue", (FreeBlockQueue,), {name: spy(name) for name in public})
    monkeypatch.setattr(contracts, "QUEUE_TYPE", spying)
    for function in CONTRACTS:
        if function is not contracts.operations_contract:
            _failures(function)
    assert called == public


def test_target_variable_selects_a_planted_bug() -> None:
    """VERIFIED_QUEUE_SPEC_TARGET picks the queue class, and a wrong name is refused."""
    script = "import specs.contracts as c; print(c.QUEUE_TYPE.__name__)"

    def target(value: str) -> subprocess.CompletedProcess[str]:
        environment = {**os.environ, contracts.TARGET_VARIABLE: value}
        environment["PYTHONPATH"] = os.pathsep.join([*sys.path, str(ROOT)])
        return subprocess.run(
            [sys.executable, "-c", script],
            env=environment,
            capture_output=True,
            text=True,
            check=False,
        )

    assert target("").stdout.strip() == "FreeBlockQueue"
    assert target("remove_forgets_count").stdout.strip() == "RemoveForgetsCount"
    assert target("no_such_bug").returncode != 0


PLANTED_RUN = os.environ.get("VERIFIED_QUEUE_CROSSHAIR_PLANTED") == "1"


@pytest.mark.skipif(not PLANTED_RUN, reason="slow: the crosshair-planted tox environment runs it")
def test_crosshair_reports_every_planted_bug() -> None:
    """``crosshair check specs.contracts`` finds a counterexample for every planted bug."""
    timeout = os.environ.get("VERIFIED_QUEUE_CROSSHAIR_TIMEOUT", "6")

    def check(bug: str) -> tuple[str, int, str]:
        environment = {**os.environ, contracts.TARGET_VARIABLE: bug}
        environment["PYTHONPATH"] = os.pathsep.join([str(ROOT), *sys.path])
        command = [
            sys.executable,
            "-m",
            "crosshair",
            "check",
            f"--per_condition_timeout={timeout}",
            "specs.contracts",
        ]
        done = subprocess.run(
            command, env=environment, capture_output=True, text=True, cwd=ROOT, check=False
        )
        return bug, done.returncode, done.stdout

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        runs = list(pool.map(check, CROSSHAIR_BUGS))
    for bug, returncode, output in runs:
        counterexamples = [line for line in output.splitlines() if "error: false when" in line]
        print(f"{bug}: {len(counterexamples)} conditions with a counterexample")
        assert returncode == 1, f"{bug}: crosshair exited {returncode}\n{output}"
        assert counterexamples, f"{bug}: no counterexample\n{output}"
