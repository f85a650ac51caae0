"""The CrossHair contracts of ``specs.contracts``: true of the queue, false of every planted bug.

CrossHair itself runs in the ``crosshair`` tox environment (the real queue; any counterexample
fails it) and, over every planted bug, in ``crosshair-planted``, which sets
``VERIFIED_QUEUE_CROSSHAIR_PLANTED=1`` to enable :func:`test_crosshair_reports_every_planted_bug`.
The other tests evaluate the same ``pre:``/``post:`` conditions concretely, on inputs of each
contract's domain, so the default run already shows the contracts hold of the queue and are
not vacuous; and they check the one symmetry the contracts still rest on, that the queue's
behaviour does not depend on which block objects it is given.
"""

from __future__ import annotations

import inspect
import itertools
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from specs import contracts
from specs.bug_matrix import MISSES
from specs.crosshair_run import CONFIRMED
from specs.crosshair_run import CONTRACTS as CONTRACT_ORDER
from specs.planted_bugs import CATALOGUE, PLANTED_BUGS
from verified_queue.block import Block
from verified_queue.queue import FreeBlockQueue

ROOT = Path(__file__).resolve().parents[2]

#: The planted bugs each run must report: all but those specs.bug_matrix.MISSES explains.
CONTRACT_BUGS = sorted(set(PLANTED_BUGS) - {bug for layer, bug in MISSES if layer == "contracts"})
CROSSHAIR_BUGS = sorted(set(PLANTED_BUGS) - {bug for layer, bug in MISSES if layer == "crosshair"})
UNIVERSE = contracts.UNIVERSE
CODES = range(contracts.FOREIGN_LAST, UNIVERSE)
#: Every state: each order of each subset of the universe.
ORDERS = [
    list(order)
    for size in range(UNIVERSE + 1)
    for order in itertools.permutations(range(UNIVERSE), size)
]
#: The states "blocks 0 .. size-1 in order", and one out of order.
CANONICAL = [list(range(size)) for size in range(UNIVERSE + 1)]
SOME_ORDERS = [*CANONICAL, [2, 0]]
#: Batches up to 2 of every code, and of 3 blocks of the universe.
BATCHES = [
    *(list(batch) for length in range(3) for batch in itertools.product(CODES, repeat=length)),
    *(list(batch) for batch in itertools.product(range(UNIVERSE), repeat=3)),
]


def _conditions(function: Callable[..., object], kind: str) -> list[str]:
    """The ``pre:`` or ``post:`` expressions of a PEP 316 docstring."""
    prefix = f"{kind}:"
    lines = (line.strip() for line in (function.__doc__ or "").splitlines())
    return [line[len(prefix) :].strip() for line in lines if line.startswith(prefix)]


def _domain(function: Callable[..., object]) -> Iterator[tuple[Any, ...]]:
    """Inputs of the contract's domain (a superset: the ``pre:`` conditions filter it)."""
    name = function.__name__
    if name == "popleft_contract":
        yield from ((order,) for order in ORDERS)
    elif name == "popleft_n_contract":
        yield from itertools.product(ORDERS, range(-3, UNIVERSE + 4))
    elif name in {"remove_contract", "append_contract", "queries_contract"}:
        yield from itertools.product(ORDERS, CODES)
    elif name == "iter_blocks_after_contract":
        yield from itertools.product(ORDERS, [contracts.NONE, *CODES])
    elif name in {"append_n_contract", "prepend_n_contract", "construct_contract"}:
        yield from itertools.product(SOME_ORDERS, BATCHES, range(contracts.SHAPES))
    elif name == "operations_contract":
        instructions = list(itertools.product(range(7), range(-4, UNIVERSE)))
        for length in range(3):
            for program in itertools.product(instructions, repeat=length):
                yield from ((order, list(program)) for order in SOME_ORDERS)
    else:
        raise LookupError(f"no domain for {name}")


#: Every contract, cheapest first (a planted bug is found sooner); the harness, which only
#: combines the others and has the largest domain, last.
CONTRACTS = sorted(
    (
        function
        for name, function in inspect.getmembers(contracts, inspect.isfunction)
        if name.endswith("_contract") and function.__module__ == contracts.__name__
    ),
    key=lambda function: CONTRACT_ORDER.index(function.__name__),
)


def _holds(function: Callable[..., object], kind: str, namespace: dict[str, Any]) -> list[str]:
    """The ``kind`` conditions of ``function`` that are false in ``namespace``."""
    return [
        condition for condition in _conditions(function, kind) if not eval(condition, namespace)
    ]


def _failures(
    function: Callable[..., object],
    *,
    first: bool = False,
    inputs: Iterable[tuple[Any, ...]] | None = None,
) -> tuple[int, list[str]]:
    """Evaluate the contract on its domain (or ``inputs``): (inputs checked, failed conditions).

    With ``first``, stop at the first input on which a condition fails.
    """
    parameters = list(inspect.signature(function).parameters)
    checked = 0
    failed: list[str] = []
    for arguments in _domain(function) if inputs is None else inputs:
        namespace: dict[str, Any] = {
            **vars(contracts),
            **dict(zip(parameters, arguments, strict=True)),
        }
        if _holds(function, "pre", namespace):
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
            f"{function.__name__}{arguments}: {condition} {_problems(namespace['_'])}"
            for condition in _holds(function, "post", namespace)
        )
        if first and failed:
            break
    return checked, failed


def _problems(result: object) -> list[str]:
    """The clauses a contract's result breaks, when it is a :class:`~specs.contracts.Step`."""
    return contracts.problems(result) if isinstance(result, contracts.Step) else []


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


def test_preconditions_admit_exactly_the_states_of_the_queue() -> None:
    """``valid_order`` admits every order of distinct blocks and refuses repeats and strangers."""
    admitted = [
        list(order)
        for length in range(UNIVERSE + 2)
        for order in itertools.product(range(-1, UNIVERSE + 1), repeat=length)
        if contracts.valid_order(list(order))
    ]
    assert sorted(admitted) == sorted(ORDERS)


def test_errors_are_compared_by_message(monkeypatch: pytest.MonkeyPatch) -> None:
    """A queue that raises the right exception type with another message breaks a contract."""

    try:
        FreeBlockQueue().popleft()
    except Exception as error:  # the production queue's error, of the type to reuse
        error_type = type(error)

    class SameTypeOtherWords(FreeBlockQueue[Any]):
        """``popleft`` on an empty queue raises the production type with other words."""

        __slots__ = ()

        def popleft(self) -> Any:
            """Pop the front block; word the empty-queue error differently."""
            if not self:
                raise error_type("the queue is empty")
            return super().popleft()

    monkeypatch.setattr(contracts, "QUEUE_TYPE", SameTypeOtherWords)
    step = contracts.popleft_contract([])
    assert step.error is not None
    assert step.model_error is not None
    assert step.error.split(":")[0] == step.model_error.split(":")[0]
    assert contracts.problems(step) == ["error"]


@pytest.mark.parametrize("bug", CONTRACT_BUGS)
def test_contracts_reject_planted_bug(bug: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Some postcondition fails on some input for every planted bug."""
    monkeypatch.setattr(contracts, "QUEUE_TYPE", PLANTED_BUGS[bug])
    noticed = any(_failures(function, first=True)[1] for function in CONTRACTS)
    assert noticed, f"no contract notices {bug}"


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


def test_batch_shapes_reach_the_queue_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """The five batch shapes hand the queue a list, a tuple, an iterator, a generator, and a
    generator that raises after its last block."""
    received: list[str] = []

    class Recording(FreeBlockQueue[Any]):
        """Records the type of each batch ``append_n`` is given."""

        __slots__ = ()

        def append_n(self, blocks: Iterable[Any]) -> None:
            """Record the batch's type (not the constructor's empty one) and hand it on."""
            if blocks != ():
                received.append(type(blocks).__name__)
            super().append_n(blocks)

    monkeypatch.setattr(contracts, "QUEUE_TYPE", Recording)
    errors = [
        contracts.append_n_contract([], [0], shape).error for shape in range(contracts.SHAPES)
    ]
    assert received == ["list", "tuple", "list_iterator", "generator", "generator"]
    assert errors == [None] * 4 + [f"RuntimeError: {contracts.BATCH_FAILURE}"]


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


# The symmetry the contracts rest on. CrossHair explores every order of the four blocks of the
# universe, but the blocks are always the same four objects, allocated in number order. The
# tests below check that this choice loses nothing: renaming the blocks of a state (and
# allocating them in another order, so that their identities compare differently) renames
# the outcome and changes nothing else.

#: Renamings: every permutation of the universe.
PERMUTATIONS = list(itertools.permutations(range(UNIVERSE)))
#: Fewer renamings for the batch contracts: a swap, a rotation and the reversal.
SOME_PERMUTATIONS: list[tuple[int, ...]] = [(1, 0, 2, 3), (1, 2, 3, 0), (3, 2, 1, 0)]
#: Batches up to 2 of every code, as a list or as the failing generator, from each canonical state.
BATCH_INPUTS: list[tuple[Any, ...]] = list(
    itertools.product(CANONICAL, BATCHES[:111], [0, contracts.SHAPES - 1])
)
#: Arguments that are block codes, by parameter name; ``order`` and ``batch`` hold codes too.
CODE_PARAMETERS = {"block", "cursor"}
_SPEC_BLOCK = re.compile(r"SpecBlock\((\d+)\)")
_ADDRESS = re.compile(r"0x[0-9a-f]+")


def _rename_code(code: int, renaming: Sequence[int]) -> int:
    """A block's code renamed; a sentinel's or another queue's code unchanged."""
    return renaming[code] if 0 <= code < UNIVERSE else code


def _rename_codes(codes: Iterable[int], renaming: Sequence[int]) -> tuple[int, ...]:
    return tuple(_rename_code(code, renaming) for code in codes)


def _rename_text(text: object, renaming: Sequence[int]) -> object:
    """A message with every ``SpecBlock(k)`` of the universe renamed and addresses hidden."""
    if not isinstance(text, str):
        return text

    def renamed(match: re.Match[str]) -> str:
        number = int(match.group(1))
        return f"SpecBlock({renaming[number] if number < UNIVERSE else number})"

    return _ADDRESS.sub("0x?", _SPEC_BLOCK.sub(renamed, text))


def _rename_result(result: object, renaming: Sequence[int]) -> object:
    if isinstance(result, int) and not isinstance(result, bool):
        return _rename_code(result, renaming)
    if isinstance(result, tuple):
        return _rename_codes(result, renaming)
    return _rename_text(result, renaming)


def _rename_links(links: contracts.Links, renaming: Sequence[int]) -> contracts.Links:
    """A links snapshot of the renamed world: each block's entry moves to its new number."""
    moved = list(links)
    for slot, (before, after) in enumerate(links):
        target = renaming[slot] if slot < UNIVERSE else slot
        moved[target] = (_rename_code(before, renaming), _rename_code(after, renaming))
    return tuple(moved)


def _observed(outcome: object, renaming: Sequence[int]) -> object:
    """What the queue did (not the model), with the blocks renamed by ``renaming``."""
    if isinstance(outcome, contracts.Step):
        return (
            _rename_result(outcome.result, renaming),
            _rename_text(outcome.error, renaming),
            _rename_codes(outcome.after, renaming),
            outcome.num_free_blocks,
            _rename_links(outcome.links_after, renaming),
            _rename_text(outcome.invariant_problem, renaming),
        )
    if isinstance(outcome, tuple):  # queries_contract: len, bool, in, two walks, ...
        size, truth, member, walked, listed = outcome[:5]
        return (
            size,
            truth,
            _rename_text(member, renaming),
            _rename_result(walked, renaming),
            (_rename_result(listed[0], renaming), listed[1]),
        )
    raise TypeError(f"unexpected outcome {outcome!r}")


def _rename_arguments(
    parameters: Sequence[str], arguments: Sequence[Any], renaming: Sequence[int]
) -> list[Any]:
    renamed: list[Any] = []
    for parameter, argument in zip(parameters, arguments, strict=True):
        if parameter in {"order", "batch"}:
            renamed.append(list(_rename_codes(argument, renaming)))
        elif parameter in CODE_PARAMETERS:
            renamed.append(_rename_code(argument, renaming))
        else:
            renamed.append(argument)
    return renamed


#: The single-operation contracts, with the inputs and renamings the symmetry test tries.
SYMMETRY_CASES: list[tuple[str, list[tuple[Any, ...]], list[tuple[int, ...]]]] = [
    ("popleft_contract", [(order,) for order in CANONICAL], PERMUTATIONS),
    (
        "popleft_n_contract",
        list(itertools.product(CANONICAL, range(-2, UNIVERSE + 3))),
        PERMUTATIONS,
    ),
    ("remove_contract", list(itertools.product(CANONICAL, CODES)), PERMUTATIONS),
    ("append_contract", list(itertools.product(CANONICAL, CODES)), PERMUTATIONS),
    ("queries_contract", list(itertools.product(CANONICAL, CODES)), PERMUTATIONS),
    (
        "iter_blocks_after_contract",
        list(itertools.product(CANONICAL, [contracts.NONE, *CODES])),
        PERMUTATIONS,
    ),
    *(
        (
            name,
            BATCH_INPUTS,
            SOME_PERMUTATIONS,
        )
        for name in ("append_n_contract", "prepend_n_contract", "construct_contract")
    ),
]


def _asymmetries(
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    inputs: list[tuple[Any, ...]],
    renamings: list[tuple[int, ...]],
    *,
    first: bool,
) -> tuple[int, list[str]]:
    """Run ``name`` on each input and on each renaming of it: (runs compared, differences).

    A renamed run also allocates its blocks in reverse number order, so that the blocks'
    identities (``id``) compare the other way round from the original run.
    """
    function = getattr(contracts, name)
    parameters = list(inspect.signature(function).parameters)
    world = contracts._World
    compared = 0
    differences: list[str] = []
    for arguments in inputs:
        namespace = {**vars(contracts), **dict(zip(parameters, arguments, strict=True))}
        if _holds(function, "pre", namespace):
            continue
        monkeypatch.setattr(contracts, "_World", world)
        expected = function(*arguments)
        for renaming in renamings:
            renamed = _rename_arguments(parameters, arguments, renaming)

            def reallocated(order: Sequence[int]) -> contracts._World:
                return world(order, allocation=range(UNIVERSE - 1, -1, -1))

            monkeypatch.setattr(contracts, "_World", reallocated)
            got = function(*renamed)
            compared += 1
            if _observed(got, (0, 1, 2, 3)) != _observed(expected, renaming):
                differences.append(f"{name}{tuple(arguments)} renamed by {renaming}")
                if first:
                    return compared, differences
    monkeypatch.setattr(contracts, "_World", world)
    return compared, differences


@pytest.mark.parametrize(
    ("name", "inputs", "renamings"), SYMMETRY_CASES, ids=[case[0] for case in SYMMETRY_CASES]
)
def test_relabelling_the_blocks_relabels_the_outcome(
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    inputs: list[tuple[Any, ...]],
    renamings: list[tuple[int, ...]],
) -> None:
    """Renaming the blocks of a state and of the arguments renames the queue's outcome, and
    allocating the blocks in another order changes nothing: the queue depends on how the
    arguments relate to its blocks, not on which objects they are."""
    compared, differences = _asymmetries(monkeypatch, name, inputs, renamings, first=False)
    assert compared > 0
    assert differences == []


class BatchSortedById(FreeBlockQueue[Any]):
    """``append_n`` links a batch in the order of the blocks' ``id()`` (for "memory locality").

    It agrees with the model whenever the batch happens to come in address order, so a check
    that always allocates the same objects in the same order can miss it.
    """

    __slots__ = ()

    def append_n(self, blocks: Iterable[Block]) -> None:
        """Append ``blocks`` sorted by their addresses."""
        super().append_n(sorted(blocks, key=id))


class FirstAllocatedFirst(FreeBlockQueue[Any]):
    """``popleft`` hands out whichever free block was allocated first (lowest ``id()``).

    On a state whose blocks were allocated in queue order it is the front block, as it should be.
    """

    __slots__ = ()

    def popleft(self) -> Any:
        """Remove and return the free block with the lowest address."""
        if not self:
            return super().popleft()
        block = min(self, key=id)
        self.remove(block)
        return block


@pytest.mark.parametrize(
    ("variant", "name"),
    [(BatchSortedById, "append_n_contract"), (FirstAllocatedFirst, "popleft_contract")],
    ids=["batch_sorted_by_id", "first_allocated_first"],
)
def test_relabelling_catches_a_queue_that_depends_on_identity_order(
    monkeypatch: pytest.MonkeyPatch, variant: type[FreeBlockQueue[Any]], name: str
) -> None:
    """A queue whose outcome depends on the blocks' addresses breaks the relabelling symmetry."""
    monkeypatch.setattr(contracts, "QUEUE_TYPE", variant)
    _, inputs, renamings = next(case for case in SYMMETRY_CASES if case[0] == name)
    _, differences = _asymmetries(monkeypatch, name, inputs, renamings, first=True)
    assert differences


def test_crosshair_runner_counts_paths_and_finds_counterexamples() -> None:
    """The runner reports a confirmed contract with its path count, and a planted bug's
    counterexample."""
    pytest.importorskip("crosshair")
    script = (
        "from specs.crosshair_run import analyse; "
        "print(analyse('popleft_contract', 60.0)[0]); "
        "print(analyse('popleft_contract', 20.0, 'sentinel_returned')[0])"
    )
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=environment,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    confirmed, refuted = done.stdout.splitlines()
    assert f"outcome='{CONFIRMED}'" in confirmed
    paths = int(re.search(r"paths=(\d+)", confirmed).group(1))  # type: ignore[union-attr]
    assert paths >= len(ORDERS)  # at least one path per state
    assert "outcome='counterexample'" in refuted


PLANTED_RUN = os.environ.get("VERIFIED_QUEUE_CROSSHAIR_PLANTED") == "1"

#: The contract that calls each overridden method that is not named after its own contract.
OWN_CONTRACT = {
    "__init__": "construct_contract",
    "__iter__": "queries_contract",
    "__contains__": "queries_contract",
    "get_all_free_blocks": "queries_contract",
}


@pytest.mark.skipif(not PLANTED_RUN, reason="slow: the crosshair-planted tox environment runs it")
def test_crosshair_reports_every_planted_bug() -> None:
    """CrossHair finds a counterexample to some contract for every planted bug."""
    timeout = os.environ.get("VERIFIED_QUEUE_CROSSHAIR_TIMEOUT", "6")

    def check(bug: str) -> tuple[str, int, str]:
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
        # The contract of the method the bug overrides first, then the others in turn.
        operation = CATALOGUE[bug].operation
        own = OWN_CONTRACT.get(operation, f"{operation}_contract")
        command = [
            sys.executable,
            "-m",
            "specs.crosshair_run",
            f"--per-condition-timeout={timeout}",
            f"--target={bug}",
            "--first",
            own,
            *(name for name in CONTRACT_ORDER if name != own),
        ]
        done = subprocess.run(
            command, env=environment, capture_output=True, text=True, cwd=ROOT, check=False
        )
        return bug, done.returncode, done.stdout + done.stderr

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        runs = list(pool.map(check, CROSSHAIR_BUGS))
    missed = []
    for bug, returncode, output in runs:
        found = [
            line
            for line in output.splitlines()
            if " counterexample " in line and "no counterexample" not in line
        ]
        print(f"{bug}: {found[0].split()[0] if found else 'no counterexample'}")
        if returncode != 1 or not found:
            missed.append(f"{bug}: exit {returncode}\n{output}")
    assert missed == []
