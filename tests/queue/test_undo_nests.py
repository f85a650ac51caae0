"""The three handler nests that call the undo keep one shape (``verified_queue._undo``).

``append_n`` and ``prepend_n`` write their staging loop and its three handlers out
in full, for speed; these tests read the source and fail when the two copies drift
apart anywhere but in the end the batch joins at, or when an outer handler of any
batch method stops deferring to the restartable undo.
"""

from __future__ import annotations

import ast
import dis
import sys
from collections.abc import Iterator
from pathlib import Path
from types import CodeType

import pytest

from verified_queue import queue as queue_module

# The compiled build keeps the sources beside its extension modules.
SOURCE = Path(str(queue_module.__file__)).parent / "queue.py"


def _method(name: str) -> ast.FunctionDef:
    tree = ast.parse(SOURCE.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "FreeBlockQueue":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    raise LookupError(name)


def _nest(name: str) -> ast.Try:
    """The outermost ``try`` of the method: the nest of three handlers."""
    tries = [node for node in _method(name).body if isinstance(node, ast.Try)]
    if len(tries) != 1:
        raise AssertionError(f"{name} has {len(tries)} top-level try statements, not one")
    return tries[0]


def _innermost(nest: ast.Try) -> ast.Try:
    inner = nest
    while len(inner.body) == 1 and isinstance(inner.body[0], ast.Try):
        inner = inner.body[0]
    return inner


class _Anonymous(ast.NodeTransformer):
    """Replace the operation's own name, and, where asked, every name and link read."""

    def __init__(self, operation: str, *, names: bool) -> None:
        self.operation = operation
        self.names = names
        self.seen: dict[str, str] = {}

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if node.value == self.operation:
            return ast.copy_location(ast.Constant("OPERATION"), node)
        if self.names and node.value in ("head", "tail"):
            return ast.copy_location(ast.Constant("SENTINEL"), node)
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if self.names:
            node.id = self.seen.setdefault(node.id, f"name{len(self.seen)}")
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if self.names and node.attr in ("prev_free_block", "next_free_block"):
            node.attr = "LINK"
        return node


def _shape(node: ast.AST, operation: str, *, names: bool = False) -> str:
    copy = ast.parse(ast.unparse(node))
    return ast.dump(_Anonymous(operation, names=names).visit(copy))


def _split(name: str) -> tuple[ast.Try, list[ast.stmt]]:
    """The nest with the statements after the staging loop taken out, and those statements."""
    nest = _nest(name)
    inner = _innermost(nest)
    loops = [index for index, stmt in enumerate(inner.body) if isinstance(stmt, ast.For)]
    if len(loops) != 1:
        raise AssertionError(f"{name}'s innermost try holds {len(loops)} loops, not one")
    after_loop = inner.body[loops[0] + 1 :]
    del inner.body[loops[0] + 1 :]
    return nest, after_loop


def test_append_n_and_prepend_n_nests_are_identical_but_for_the_operation() -> None:
    """The loop, the three handlers and their undo calls are the same text in both."""
    append_nest, _ = _split("append_n")
    prepend_nest, _ = _split("prepend_n")
    assert _shape(append_nest, "append_n") == _shape(prepend_nest, "prepend_n")


def test_append_n_and_prepend_n_differ_after_the_loop_only_in_names() -> None:
    """After the loop each reads the end it joins at: the same statements, other names."""
    _, append_end = _split("append_n")
    _, prepend_end = _split("prepend_n")
    assert append_end, "append_n reads nothing after its loop"
    module = ast.Module
    assert _shape(module(append_end, []), "append_n", names=True) == _shape(
        module(prepend_end, []), "prepend_n", names=True
    )


@pytest.mark.parametrize(
    ("name", "restartable"),
    [
        ("append_n", "finish_unstage"),
        ("prepend_n", "finish_unstage"),
        ("popleft_n", "relink_taken"),
    ],
)
def test_every_outer_handler_defers_to_the_restartable_undo(name: str, restartable: str) -> None:
    """Each of the two outer handlers re-raises once undone, and else runs the restartable undo."""
    nest = _nest(name)
    levels = [nest, nest.body[0]]
    assert all(isinstance(level, ast.Try) for level in levels)
    for level in levels:
        assert isinstance(level, ast.Try)
        (handler,) = level.handlers
        first, second = handler.body
        assert ast.unparse(first) == "if undone:\n    raise"
        called = {
            node.func.id
            for node in ast.walk(second)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        }
        assert isinstance(second, ast.Raise), ast.unparse(second)
        assert called == {restartable}, ast.unparse(second)
    inner = _innermost(nest)
    assert isinstance(inner.body[0], (ast.Assign, ast.AnnAssign, ast.For))
    (handler,) = inner.handlers
    assert "undone = True" in ast.unparse(handler), f"{name}'s first handler never sets undone"


#: The modules whose handlers keep the fault contract: the batch methods, their undo, and the
#: pool's methods and repairs.
HANDLER_MODULES = ("queue.py", "_undo.py", "kvcache/pool.py", "kvcache/_repair.py")


def _code_objects(code: CodeType) -> Iterator[CodeType]:
    yield code
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            yield from _code_objects(constant)


def _uncovered_back_edges(source: str, filename: str) -> list[str]:
    """The back edges of loops inside a ``try`` that the try's exception-table range leaves out.

    A back edge whose target (the loop's start) a handler covers is inside that
    handler's ``try``; the back edge itself must then be covered by the same handler,
    or an interrupt run there (at it, on 3.13) escapes the frame's every handler.
    """
    found = []
    for code in _code_objects(compile(source, filename, "exec")):
        table = dis._parse_exception_table(code)  # type: ignore[attr-defined]  # 3.11+, private
        instructions = list(dis.get_instructions(code))
        # A handler of a try statement starts with PUSH_EXC_INFO; an inlined comprehension's
        # cleanup (3.12+), which restores its loop variable, does not, and is no handler of ours.
        handlers = {
            instruction.offset
            for instruction in instructions
            if instruction.opname == "PUSH_EXC_INFO"
        }
        for instruction in instructions:
            # JUMP_BACKWARD_NO_INTERRUPT runs no signal handler.
            if "JUMP_BACKWARD" not in instruction.opname or "NO_INTERRUPT" in instruction.opname:
                continue
            target = instruction.argval
            wanted = {
                e.target
                for e in table
                if e.start <= target < e.end and not e.lasti and e.target in handlers
            }
            have = {e.target for e in table if e.start <= instruction.offset < e.end}
            if wanted - have:
                # positions and co_qualname are 3.11's, as is the exception table.
                positions = getattr(instruction, "positions", None)
                line = None if positions is None else positions.lineno
                found.append(f"{filename}:{line} in {getattr(code, 'co_qualname', code.co_name)}")
    return found


@pytest.mark.skipif(sys.version_info < (3, 11), reason="3.10 has no exception table to read")
@pytest.mark.parametrize("module", HANDLER_MODULES)
def test_every_loop_inside_a_try_keeps_its_back_edge_covered(module: str) -> None:
    """No ``while <condition>`` loop inside a handler's try: its back edge would escape on 3.13."""
    path = SOURCE.parent / module
    assert _uncovered_back_edges(path.read_text(encoding="utf-8"), module) == []


@pytest.mark.skipif(sys.version_info < (3, 12), reason="3.11 covers the back edge")
def test_the_back_edge_check_finds_a_condition_loop_inside_a_try() -> None:
    """The check itself fires: ``while i < n`` inside a try, as the undo used to write it."""
    source = (
        "def retry(n):\n"
        "    i = 0\n"
        "    try:\n"
        "        while i < n:\n"
        "            i += 1\n"
        "    except BaseException:\n"
        "        pass\n"
    )
    assert _uncovered_back_edges(source, "retry.py") == ["retry.py:4 in retry"]
