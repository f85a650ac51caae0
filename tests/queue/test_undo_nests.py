"""The three handler nests that call the undo keep one shape (``verified_queue._undo``).

``append_n`` and ``prepend_n`` write their staging loop and its three handlers out
in full, for speed; these tests read the source and fail when the two copies drift
apart anywhere but in the end the batch joins at, or when an outer handler of any
batch method stops deferring to the restartable undo.
"""

from __future__ import annotations

import ast
from pathlib import Path

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
