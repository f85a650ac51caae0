"""Each planted bug that copies production code differs from it by one hunk: no copy drifts.

:data:`specs.planted_bugs.copies.COPIES` names, for each copying bug, the production function
of each function it copies; :data:`~specs.planted_bugs.copies.NOT_COPIES` the bugs written from
scratch, with the reason. Both functions are read from the working tree (the package's files
in the checkout, not an installed wheel), so a copy is held to the code as it is now. Before
they are compared, each is parsed and unparsed (comments and layout go), its docstring and
its signature's annotations are dropped (a method copied as a function annotates ``self``),
and the copy's name and the helpers it calls are renamed to the production names
(:attr:`~specs.planted_bugs.copies.Copy.renames`). A bug's copies must then differ from the
production functions by exactly one hunk (one non-equal ``difflib`` opcode) of at most
:data:`~specs.planted_bugs.copies.MAX_HUNK_LINES` lines on either side, or, for a bug whose
defect moves statements, by one deletion and one insertion of the same lines.
"""

from __future__ import annotations

import ast
import difflib
from pathlib import Path

import pytest

from specs.planted_bugs import CATALOGUE
from specs.planted_bugs.checkers import CHECKER_CATALOGUE
from specs.planted_bugs.copies import COPIES, MAX_HUNK_LINES, NOT_COPIES, Copy
from specs.planted_bugs.kvcache import CLIENT_CATALOGUE

CHECKOUT = Path(__file__).resolve().parents[2]

#: Every planted bug of the three catalogues.
ALL_BUGS = [*CATALOGUE, *CHECKER_CATALOGUE, *CLIENT_CATALOGUE]

Opcode = tuple[str, int, int, int, int]


def _function(where: str) -> ast.FunctionDef:
    """The function ``path:qualname`` as it is in the checkout now."""
    path, qualname = where.split(":")
    tree = ast.parse((CHECKOUT / path).read_text(encoding="utf-8"), path)
    body: list[ast.stmt] = tree.body
    *owners, name = qualname.split(".")
    for owner in owners:
        classes = [s for s in body if isinstance(s, ast.ClassDef) and s.name == owner]
        assert len(classes) == 1, f"class {owner} not found once in {path}"
        body = classes[0].body
    found = [s for s in body if isinstance(s, ast.FunctionDef) and s.name == name]
    assert len(found) == 1, f"{qualname} not found once in {path}"
    return found[0]


class _Rename(ast.NodeTransformer):
    """Replace each name, or dotted name, of ``renames`` by the name it stands for."""

    def __init__(self, renames: dict[str, str]) -> None:
        self.renames = renames

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if node.id in self.renames:
            return ast.copy_location(ast.Name(self.renames[node.id], node.ctx), node)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
        dotted = ast.unparse(node)
        if dotted in self.renames:
            return ast.copy_location(ast.Name(self.renames[dotted], node.ctx), node)
        self.generic_visit(node)
        return node


def normalised(function: ast.FunctionDef, name: str, renames: dict[str, str]) -> list[str]:
    """``function``'s source lines without docstring and annotations, named ``name``."""
    copied = ast.parse(ast.unparse(function)).body[0]
    assert isinstance(copied, ast.FunctionDef)
    if ast.get_docstring(copied) is not None:
        copied.body = copied.body[1:] or [ast.Pass()]
    copied.name = name
    copied.returns = None
    arguments = copied.args
    for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
        argument.annotation = None
    for star in (arguments.vararg, arguments.kwarg):
        if star is not None:
            star.annotation = None
    renamed = _Rename(renames).visit(copied)
    return ast.unparse(ast.fix_missing_locations(renamed)).splitlines()


def differences(copy: Copy) -> tuple[list[str], list[str], list[Opcode]]:
    """The production lines, the copy's lines and the opcodes that are not ``equal``."""
    production = _function(copy.production)
    name = production.name
    want = normalised(production, name, {})
    got = normalised(_function(copy.planted), name, dict(copy.renames))
    matcher = difflib.SequenceMatcher(None, want, got, autojunk=False)
    return want, got, [op for op in matcher.get_opcodes() if op[0] != "equal"]


def _diff(copy: Copy, want: list[str], got: list[str]) -> str:
    return "\n".join(
        difflib.unified_diff(want, got, copy.production, copy.planted, n=0, lineterm="")
    )


def test_every_planted_bug_is_classified() -> None:
    """Each planted bug is a copy or written from scratch, said once, and nothing else is."""
    assert not set(COPIES) & set(NOT_COPIES)
    assert sorted({*COPIES, *NOT_COPIES}) == sorted(ALL_BUGS)
    assert len(ALL_BUGS) == len(set(ALL_BUGS))
    for name, reason in NOT_COPIES.items():
        assert reason.strip(), f"{name}: no reason why it is not a copy"


@pytest.mark.parametrize("bug", sorted(COPIES))
def test_planted_copy_differs_by_one_hunk(bug: str) -> None:
    """The bug's copies are the production functions but for one hunk: its one defect."""
    hunks: list[tuple[Copy, list[str], list[str], list[Opcode]]] = []
    for copy in COPIES[bug]:
        want, got, opcodes = differences(copy)
        if opcodes:
            hunks.append((copy, want, got, opcodes))
    report = "\n".join(_diff(copy, want, got) for copy, want, got, _ in hunks)
    assert len(hunks) == 1, f"{bug}: {len(hunks)} of its copies differ, not one\n{report}"
    copy, want, got, opcodes = hunks[0]
    if copy.moved:
        kinds = sorted(op[0] for op in opcodes)
        assert kinds == ["delete", "insert"], f"{bug}: not one move\n{report}"
        # A statement moved into or out of a block changes its indentation only.
        moved = [
            [line.strip() for line in want[a1:a2] or got[b1:b2]] for _, a1, a2, b1, b2 in opcodes
        ]
        assert moved[0] == moved[1], f"{bug}: the lines moved changed on the way\n{report}"
        return
    assert len(opcodes) == 1, f"{bug}: {len(opcodes)} hunks, not one\n{report}"
    _, a1, a2, b1, b2 = opcodes[0]
    assert max(a2 - a1, b2 - b1) <= MAX_HUNK_LINES, f"{bug}: a rewrite, not a defect\n{report}"


def test_the_drift_test_sees_a_second_hunk() -> None:
    """A copy with a second change is refused: the test is not vacuous."""
    production = _function("verified_queue/queue.py:FreeBlockQueue.remove")
    planted = _function("specs/planted_bugs/counts.py:RemoveForgetsCount.remove")
    want = normalised(production, "remove", {})
    got = normalised(planted, "remove", {})
    edited = [line.replace("before.next_free_block = after", "pass") for line in got]
    assert edited != got
    for lines, expected in ((got, 1), (edited, 2)):
        matcher = difflib.SequenceMatcher(None, want, lines, autojunk=False)
        assert sum(op[0] != "equal" for op in matcher.get_opcodes()) == expected
