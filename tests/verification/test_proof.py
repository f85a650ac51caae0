"""The all-sizes proof (specs/proof/): it proves the production queue and refutes planted bugs."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

z3 = pytest.importorskip("z3", reason="the proof needs z3 (tox -e proof installs it)")

from specs import bug_matrix, proof  # noqa: E402  (only once z3 is known to be there)
from specs.planted_bugs import PLANTED_BUGS  # noqa: E402
from verified_queue import Block, FreeBlockQueue  # noqa: E402
from verified_queue import queue as queue_module  # noqa: E402

#: Each planted bug of an operation the proof covers, with that operation.
REFUTED = [
    ("remove_forgets_count", "remove", "I2: num_free_blocks counts the blocks"),
    ("sentinel_returned", "popleft", "raises EmptyQueueError as the model does"),
    ("remove_accepts_sentinel", "remove", "raises NotInQueueError as the model does"),
    ("append_skips_double_free_check", "append", "raises AlreadyInQueueError as the model does"),
    ("popleft_n_off_by_one", "popleft_n", "returns as the model does"),
    ("iter_yields_head_sentinel", "__iter__", "the walk starts where the model's does"),
    ("iter_blocks_after_yields_cursor", "iter_blocks_after", "the walk starts where the model's"),
    (
        "iter_blocks_after_guard_reads_next_only",
        "iter_blocks_after",
        "raises NotInQueueError as the model does",
    ),
    # Written as a generator: the call returns it, and checks its cursor only when it starts.
    ("iter_blocks_after_checks_lazily", "iter_blocks_after", "returns a live walk of this queue"),
]

#: Every public method of the queue; __repr__ alone is neither proved nor checked.
PUBLIC = {
    "popleft",
    "remove",
    "append",
    "popleft_n",
    "append_n",
    "prepend_n",
    "__init__",
    "__len__",
    "__bool__",
    "__contains__",
    "get_all_free_blocks",
    "__iter__",
    "iter_blocks_after",
}


def test_proof_covers_every_public_method() -> None:
    """The proof covers every public method but repr and the copy protocol (checked, below)."""
    assert set(proof.OPERATIONS) == PUBLIC
    assert ("lemmas", *proof.OPERATIONS, proof.WALK) == proof.PROVED
    # The bug matrix runs where z3 is not installed, so it names them itself: in step.
    assert set(bug_matrix.PROVED_OPERATIONS) == set(proof.PROVED) - {"lemmas"}
    methods = {name for name, value in vars(FreeBlockQueue).items() if callable(value)}
    public = {name for name in methods if not name.startswith("_")}
    dunders = {name for name in methods if name.startswith("__") and name != "__class_getitem__"}
    copying = {"__reduce__", "__setstate__", "__copy__", "__repr__"}
    assert public | (dunders - copying) == PUBLIC


@pytest.mark.parametrize("name", proof.PROVED)
def test_production_operation_is_proved_for_every_size(name: str) -> None:
    """Every obligation of the operation, translated from queue.py, is valid for all sizes."""
    results = proof.prove([name])
    assert results, "an operation with no obligation proves nothing"
    failed = [(r.name, r.verdict, r.counterexample) for r in results if r.verdict != "proved"]
    assert failed == []


def test_proof_covers_results_invariants_errors_and_frame() -> None:
    """The obligations name the result, each invariant, the refused calls and the frame."""
    names = [obligation.name for obligation in proof.obligations("remove")]
    for expected in (
        "returns None",
        "I1: forward links follow the chain afterwards",
        "I2: num_free_blocks counts the blocks afterwards",
        "I3: no node appears twice afterwards",
        "I4: a block in no queue is detached afterwards",
        "a refused call changes no link",
        "a refused call keeps the count",
        "no node outside the queue changes",
        "no link read of None",
    ):
        assert any(expected in name for name in names), expected


def test_comparing_by_value_is_refuted() -> None:
    """An ``in`` that compares with ``==`` fails: the proof leaves ``__eq__`` unknown.

    The planted loop is the production loop with ``is`` written ``==``, so its invariant is
    the production loop's, which a block equal by value but not itself breaks.
    """
    bug = PLANTED_BUGS["contains_compares_by_value"]
    invariants = dict(proof.LOOP_INVARIANTS)
    invariants[f"{bug.__name__}.__contains__", 0] = proof.LOOP_INVARIANTS[
        "FreeBlockQueue.__contains__", 0
    ]
    results = proof.prove(
        ["__contains__"], bug, stop_at_first_failure=True, loop_invariants=invariants
    )
    assert results[-1].verdict == "counterexample"
    assert "loop invariant" in results[-1].name


@pytest.mark.parametrize(("bug", "operation", "goal"), REFUTED)
def test_planted_bug_yields_a_counterexample(bug: str, operation: str, goal: str) -> None:
    """z3 finds a counterexample to the planted bug's operation, on the goal the bug breaks."""
    results = proof.prove([operation], PLANTED_BUGS[bug], stop_at_first_failure=True)
    last = results[-1]
    assert last.verdict == "counterexample", (last.name, last.verdict)
    assert goal in last.name


@pytest.mark.parametrize(
    ("bug", "operation"),
    [("append_n_not_atomic", "append_n"), ("prepend_n_not_atomic", "prepend_n")],
)
def test_batch_that_is_not_atomic_is_not_proved(bug: str, operation: str) -> None:
    """A batch that keeps the blocks before a refused one fails "a refused call changes no link"."""
    # The planted loop is the production loop under another name, so its invariant is the same.
    invariants = dict(proof.LOOP_INVARIANTS)
    invariants[(f"{PLANTED_BUGS[bug].__name__}.{operation}", 0)] = proof.LOOP_INVARIANTS[
        (f"FreeBlockQueue.{operation}", 0)
    ]
    results = proof.prove(
        [operation],
        PLANTED_BUGS[bug],
        stop_at_first_failure=True,
        timeout_ms=2_000,
        loop_invariants=invariants,
    )
    assert results[-1].verdict != "proved"
    assert "a refused call changes no link" in results[-1].name
    found = proof.find_counterexample(operation, PLANTED_BUGS[bug])
    assert found is not None
    assert "a refused call changes no link" in found.name


#: One-line edits of queue.py or _undo.py, each a bug: the operation whose proof breaks, its goal.
EDITS = [
    ("popleft_n", "                    block.prev_free_block = head\n", "", "back links"),
    (
        "remove",
        "        after.prev_free_block = before\n",
        "        after.prev_free_block = node\n",
        "back links",
    ),
    ("append_n", "            tail.prev_free_block = last\n", "", "back links"),
    ("append_n", "            first.prev_free_block = before\n", "", "back links"),
    (
        "prepend_n",
        "            after.prev_free_block = last\n",
        "            after.prev_free_block = head\n",
        "back links",
    ),
    # The undo of a refused batch forgets to free the tail's outer link.
    (
        "append_n",
        "again.\n    staging.next_free_block = None\n",
        "again.\n",
        "a refused call changes no link",
    ),
    (
        "__len__",
        "        return self.num_free_blocks\n\n    def __bool__",
        "        return self.num_free_blocks + 1\n\n    def __bool__",
        "returns the model's length",
    ),
    (
        "__bool__",
        "        return self.num_free_blocks != 0\n",
        "        return self.num_free_blocks > 1\n",
        "returns whether the model's list is non-empty",
    ),
    # ``in`` misses the last block.
    (
        "__contains__",
        "            if node is block:\n                return True\n",
        "            if node is block:\n                return node is not tail.prev_free_block\n",
        "returns whether the block itself is in the model's list",
    ),
    (
        "get_all_free_blocks",
        "            found.append(block)  # type: ignore[arg-type]  # I1: a B\n",
        "            found.append(tail.prev_free_block)  # type: ignore[arg-type]  # I1: a B\n",
        "the model's blocks, front first",
    ),
    # The constructor forgets the tail's back link: append_n then finds it lost.
    (
        "__init__",
        "        tail.prev_free_block = head\n        self.fake_free_list_head = head\n",
        "        self.fake_free_list_head = head\n",
        "raises AlreadyInQueueError as the model does",
    ),
    (
        "__init__",
        "        self.fake_free_list_tail = tail\n",
        "        self.fake_free_list_tail = head\n",
        "fake_free_list_tail names the queue's own tail",
    ),
    (
        "iter_blocks_after",
        "                following = node  # nothing after the tail\n",
        "                following = node.prev_free_block  # nothing after the tail\n",
        "the walk starts where the model's does",
    ),
    # The walk yields the block after the one it stands on.
    (
        proof.WALK,
        "            yield block  # type: ignore[misc]",
        "            yield following  # type: ignore[misc]",
        "a step yields what the live walk yields",
    ),
    # The walk runs past this queue's tail.
    (
        proof.WALK,
        "        while block is not tail:\n            # Links",
        "        while block is not None:\n            # Links",
        "the walk raises NotInQueueError where the live walk does",
    ),
    # The walk ends quietly when the block it stands on left the queue.
    (
        proof.WALK,
        "                # The block yielded last left the queue while the caller held it.\n"
        "                raise changed_during_iteration()",
        "                # The block yielded last left the queue while the caller held it.\n"
        "                return",
        "the walk ends where the live walk ends",
    ),
]


@pytest.fixture
def edited_queue(tmp_path: Path) -> Iterator[Any]:
    """Load edited copies of queue.py and its undo as modules of the package; unload them after.

    Each edit is made in whichever of the two files holds its text (exactly once);
    the edited queue imports the edited undo.
    """
    queue_name = "verified_queue._edited_for_proof_test"
    undo_name = "verified_queue._edited_undo_for_proof_test"
    package = Path(str(queue_module.__file__)).parent

    def module_from(name: str, source: str, path: Path) -> Any:
        path.write_text(source, encoding="utf-8")
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    def load(old: str, new: str, *more: tuple[str, str]) -> type:
        sources = {
            "queue": (package / "queue.py").read_text(encoding="utf-8"),
            "undo": (package / "_undo.py").read_text(encoding="utf-8"),
        }
        for before, after in ((old, new), *more):
            holders = [name for name, text in sources.items() if text.count(before) == 1]
            assert len(holders) == 1, before
            sources[holders[0]] = sources[holders[0]].replace(before, after)
        module_from(undo_name, sources["undo"], tmp_path / "edited_undo.py")
        queue_source = sources["queue"].replace(
            "from verified_queue._undo import", f"from {undo_name} import"
        )
        module = module_from(queue_name, queue_source, tmp_path / "edited_queue.py")
        queue_class: type = module.FreeBlockQueue
        return queue_class

    yield load
    sys.modules.pop(queue_name, None)
    sys.modules.pop(undo_name, None)


@pytest.mark.parametrize(("operation", "old", "new", "goal"), EDITS)
def test_an_edit_to_queue_py_changes_what_is_proved(
    edited_queue: Any, operation: str, old: str, new: str, goal: str
) -> None:
    """The proof reads queue.py and its undo: a one-line bug there leaves its goal unproved."""
    results = proof.prove(
        [operation], edited_queue(old, new), stop_at_first_failure=True, timeout_ms=2_000
    )
    assert results[-1].verdict != "proved"
    # A bug inside a loop may first break the loop's invariant; the concrete search then
    # names the goal itself.
    assert goal in results[-1].name or "loop invariant" in results[-1].name
    found = proof.find_counterexample(operation, edited_queue(old, new))
    assert found is not None
    assert goal in found.name


#: A message builder that declares one class and builds another, added to an edited queue.py.
MISFILED_BUILDER = '''

from verified_queue.errors import AlreadyInQueueError, NotInQueueError


def misfiled(operation: str, block: object) -> AlreadyInQueueError:
    """Build the error for a double free, of the wrong class under the right annotation."""
    return NotInQueueError(f"{operation}({block!r}): already linked")  # type: ignore[return-value]
'''


def test_a_builder_is_judged_by_the_class_it_builds(edited_queue: Any) -> None:
    """An append whose builder builds NotInQueueError for a double free is refuted."""
    queue_class = edited_queue(
        '                raise already_linked("append", block)\n',
        '                raise misfiled("append", block)\n',
        (
            '__all__ = ["EMPTY_QUEUE_MESSAGE", "FreeBlockQueue"]\n',
            '__all__ = ["EMPTY_QUEUE_MESSAGE", "FreeBlockQueue"]\n' + MISFILED_BUILDER,
        ),
    )
    results = proof.prove(["append"], queue_class, stop_at_first_failure=True)
    assert results[-1].verdict == "counterexample", (results[-1].name, results[-1].verdict)
    assert "the code raises NotInQueueError" in results[-1].name


def test_popleft_leaving_links_is_not_proved() -> None:
    """A popleft that leaves the popped block's links set fails its detached-block obligation."""
    results = proof.prove(
        ["popleft"],
        PLANTED_BUGS["popleft_leaves_links"],
        stop_at_first_failure=True,
        timeout_ms=2_000,
    )
    assert results[-1].verdict != "proved"
    assert "detached" in results[-1].name
    found = proof.find_counterexample("popleft", PLANTED_BUGS["popleft_leaves_links"])
    assert found is not None
    assert "detached" in found.name


@pytest.mark.parametrize("operation", ["popleft", "remove", "append"])
def test_bounded_search_finds_nothing_in_the_production_queue(operation: str) -> None:
    """The counterexample search reports none for the production queue (it is not trigger-happy)."""
    assert proof.find_counterexample(operation) is None


def _concrete_queue(ghost: proof.Ghost, heap: proof.Heap) -> tuple[list[Any], Any, list[Any]]:
    """Facts that pin the symbolic state to one queue: head, b1, b2, b3, tail, one detached block.

    The universe is those nodes and None; the only sentinels are this queue's, no block is in
    another queue.
    """
    node = proof.NODE
    blocks = [z3.Const(f"b{i}", node) for i in (1, 2, 3)]
    detached = z3.Const("detached", node)
    chain = [proof.HEAD, *blocks, proof.TAIL]
    at, pos = z3.K(z3.IntSort(), proof.TAIL), z3.K(node, z3.IntVal(-1))
    following, preceding = z3.K(node, proof.NONE), z3.K(node, proof.NONE)
    for index, member in enumerate(chain):
        at, pos = z3.Store(at, index, member), z3.Store(pos, member, index)
        if index + 1 < len(chain):
            following = z3.Store(following, member, chain[index + 1])
            preceding = z3.Store(preceding, chain[index + 1], member)
    x = z3.Const("x", node)
    universe = [proof.NONE, *chain, detached]
    facts = [
        z3.Distinct(*universe),
        z3.ForAll([x], z3.Or([x == member for member in universe])),
        z3.ForAll([x], proof.IS_SENTINEL(x) == z3.Or(x == proof.HEAD, x == proof.TAIL)),
        z3.ForAll([x], z3.Not(proof.LINKED_ELSEWHERE(x))),
        ghost.at == at,
        ghost.pos == pos,
        ghost.n == len(blocks),
        heap.nxt == following,
        heap.prv == preceding,
        heap.num == len(blocks),
    ]
    return blocks, detached, facts


@pytest.mark.parametrize("name", list(proof.OPERATIONS))
def test_assumptions_hold_of_a_concrete_queue(name: str) -> None:
    """A queue of three blocks satisfies the hypotheses, so the proof is not vacuous.

    Checked for the precondition of every operation (before its first link read) and, for the
    operations without a loop, for the whole path that succeeds; after a loop z3 does not
    decide it in reasonable time.
    """
    heap, ghost = proof.symbolic_state()
    blocks, detached, facts = _concrete_queue(ghost, heap)
    arguments = {
        "remove": [z3.Const("block", proof.NODE) == blocks[1]],
        "append": [z3.Const("block", proof.NODE) == detached],
        "popleft_n": [z3.Int("count") == 2],
        "__contains__": [z3.Const("block", proof.NODE) == blocks[1]],
        # Its first obligation is on the path of a None cursor.
        "iter_blocks_after": [z3.Const("block", proof.NODE) == proof.NONE],
        "append_n": [
            z3.Int("length") == 1,
            z3.Array("batch", z3.IntSort(), proof.NODE) == z3.K(z3.IntSort(), detached),
        ],
    }
    arguments["prepend_n"] = arguments["append_n"]
    arguments["__init__"] = arguments["append_n"]
    if name == "__init__":
        # No queue yet: the universe only, every node detached (the new sentinels among them).
        facts = [
            *facts[:4],
            heap.nxt == z3.K(proof.NODE, proof.NONE),
            heap.prv == z3.K(proof.NODE, proof.NONE),
        ]
    obligations = proof.obligations(name)
    loop_free = name in ("popleft", "remove", "append", "__len__", "__bool__", "__iter__")
    for obligation in (obligations[0], obligations[-1]) if loop_free else obligations[:1]:
        solver = z3.Solver()
        solver.set("timeout", 20_000)
        solver.add(*obligation.hypotheses, *facts, *arguments.get(name, []))
        assert solver.check() == z3.sat, obligation.name


class _LoopWithoutInvariant(FreeBlockQueue[Any]):
    """A popleft with a loop no invariant is stated for."""

    __slots__ = ()

    def popleft(self) -> Any:
        """Pop the front block the long way."""
        for _ in range(1):
            pass
        return super().popleft()


class _UnknownStatement(FreeBlockQueue[Any]):
    """A remove with a statement the translator does not know."""

    __slots__ = ()

    def remove(self, block: Any) -> None:
        """Remove ``block`` after a statement the translator must refuse."""
        del block
        super().remove(Block())


class _UnknownCall(FreeBlockQueue[Any]):
    """An append that calls a function outside the project."""

    __slots__ = ()

    def append(self, block: Any) -> None:
        """Append ``block`` after printing it."""
        print(block)
        super().append(block)


@pytest.mark.parametrize(
    ("queue_class", "operation", "message"),
    [
        (_LoopWithoutInvariant, "popleft", "no loop invariant"),
        (_UnknownStatement, "remove", "statement Delete"),
        (_UnknownCall, "append", "call of print"),
    ],
)
def test_translator_refuses_what_it_cannot_translate(
    queue_class: type, operation: str, message: str
) -> None:
    """Code outside the translated subset stops the proof with Unsupported, never skipped."""
    with pytest.raises(proof.Unsupported, match=message):
        proof.obligations(operation, queue_class)


def test_assumptions_of_the_walk_hold_of_a_concrete_queue() -> None:
    """A queue of three blocks, the walk standing on its first, satisfies a step's hypotheses."""
    heap, ghost = proof.symbolic_state()
    blocks, _detached, facts = _concrete_queue(ghost, heap)
    obligations = proof.obligations(proof.WALK)
    solver = z3.Solver()
    solver.set("timeout", 20_000)
    solver.add(*obligations[0].hypotheses, *facts, z3.Const("start", proof.NODE) == blocks[0])
    assert solver.check() == z3.sat


def test_bounded_walk_search_finds_nothing_in_the_production_queue() -> None:
    """The walk's bounded search reports no counterexample for the production walk."""
    assert proof.find_counterexample(proof.WALK) is None


def test_command_line_reports_every_operation(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m specs.proof`` exits 0 and prints a line per method, and the two checks."""
    assert proof.main([]) == 0
    printed = capsys.readouterr().out
    for name in proof.PROVED:
        assert f"\n{name}" in printed
    assert printed.count(": proved, ") == len(proof.PROVED)
    assert "every obligation proved" in printed
    bounded = [line for line in printed.splitlines() if "exhaustive check up to" in line]
    assert len(bounded) == 2
    for line in bounded:
        assert "NOT an all-sizes proof" in line
        assert "proved" not in line
        assert line.endswith(" s")
        assert ": no counterexample in " in line


#: One-hunk edits of the copy protocol in queue.py: each the exhaustive check must refute.
COPY_EDITS = [
    (
        "        return type(self), (), self.get_all_free_blocks()\n",
        "        return type(self), (), self.get_all_free_blocks()[1:]\n",
        "the copy holds",
    ),
    (
        "        self.append_n(blocks)\n\n    def __copy__",
        "        self.append_n(blocks[::-1])\n\n    def __copy__",
        "the copy holds",
    ),
    (
        '        raise TypeError(\n            f"a {type(self).__qualname__} cannot be shallow',
        '        return self\n        raise TypeError(\n            f"a {type(self).__qualname__} '
        "cannot be shallow",
        "copy.copy: a shallow copy was made",
    ),
]


@pytest.mark.parametrize(("old", "new", "problem"), COPY_EDITS)
def test_an_edit_to_the_copy_protocol_is_refuted(
    edited_queue: Any, old: str, new: str, problem: str
) -> None:
    """The exhaustive copy and pickle check names a queue on which each edit goes wrong."""
    report = proof.check_copy_and_pickle(edited_queue(old, new))
    assert report.counterexample is not None
    assert problem in report.counterexample


#: One-hunk edits of the undo paths only an exception from outside reaches: the fault check
#: must refute each (the all-sizes proof never enters these paths).
FAULT_EDITS = [
    # append_n's middle handler re-raises without finishing an undo a second exception cut short.
    (
        "                raise finish_unstage(batch, tail, arrived)  # noqa: B904 -- the queue is "
        "kept\n        except BaseException as arrived:\n            if undone:\n"
        "                raise\n            raise finish_unstage(batch, tail, arrived)  # noqa: "
        "B904 -- the queue is kept\n        if last is not tail:  # a batch was staged\n"
        "            # Join the staged chain between the old back block",
        "                raise arrived  # noqa: B904 -- the queue is kept\n"
        "        except BaseException as arrived:\n            if undone:\n"
        "                raise\n            raise finish_unstage(batch, tail, arrived)  # noqa: "
        "B904 -- the queue is kept\n        if last is not tail:  # a batch was staged\n"
        "            # Join the staged chain between the old back block",
        "neither as before nor as after",
    ),
    # popleft_n's first handler does not put the blocks taken back.
    (
        "                    arrived = relink_taken(head, popped, following)\n",
        "                    arrived = None\n",
        "neither as before nor as after",
    ),
    # The restartable undo leaves the tail's outer link set.
    (
        '                    if getattr(staging, "next_free_block", None) is not None:\n'
        "                        staging.next_free_block = None\n",
        "",
        "neither as before nor as after",
    ),
    # The restartable undo returns the first exception, not the last that arrived.
    (
        "                except BaseException as later:\n                    arrived = later\n"
        "            break\n        except BaseException as later:\n            arrived = later\n"
        "    return arrived\n\n\ndef unstage",
        "                except BaseException:\n                    pass\n"
        "            break\n        except BaseException as later:\n            arrived = later\n"
        "    return arrived\n\n\ndef unstage",
        "not the last exception that arrived",
    ),
    # prepend_n marks its batch undone before undoing it: an exception in the undo escapes.
    (
        "                    unstage(tail, last)\n                    undone = True\n"
        "                    if means_not_a_block(error, batch, last, tail):\n"
        '                        raise not_a_block("prepend_n"',
        "                    undone = True\n                    unstage(tail, last)\n"
        "                    if means_not_a_block(error, batch, last, tail):\n"
        '                        raise not_a_block("prepend_n"',
        "neither as before nor as after",
    ),
]


@pytest.mark.parametrize(("old", "new", "problem"), FAULT_EDITS)
def test_an_edit_to_an_undo_is_refuted_by_the_fault_check(
    edited_queue: Any, old: str, new: str, problem: str
) -> None:
    """The exhaustive fault check finds checkpoints at which each edited undo goes wrong."""
    report = proof.check_faults(edited_queue(old, new))
    assert report.counterexample is not None
    assert problem in report.counterexample


def test_command_line_fails_on_a_planted_bug(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m specs.proof --bug NAME`` exits 1 and prints the counterexample."""
    assert proof.main(["--bug", "remove_forgets_count"]) == 1
    printed = capsys.readouterr().out
    assert "counterexample: remove: block in the queue: I2" in printed
    assert "NOT PROVED" in printed
