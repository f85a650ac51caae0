"""Where the translator finds code: a function's source, and which calls it may inline."""

from __future__ import annotations

import ast
import builtins
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any

from specs.proof.state import (
    Unsupported,
)

_source_cache: dict[tuple[str, str], ast.Module] = {}


def _module_ast(filename: str) -> ast.Module:
    """The parsed source of ``filename`` as it is now (an edited file is parsed again)."""
    source = Path(filename).read_text(encoding="utf-8")
    if (filename, source) not in _source_cache:
        _source_cache[filename, source] = ast.parse(source, filename)
    return _source_cache[filename, source]


def _source_file(module: ModuleType) -> str:
    """The .py file of ``module``; a compiled build keeps its sources beside the extensions."""
    origin = Path(str(module.__file__))
    if origin.suffix != ".py":
        origin = origin.with_name(origin.name.split(".")[0] + ".py")
    if not origin.exists():
        raise Unsupported(f"no Python source for {module.__name__} at {origin}")
    return str(origin)


def _function_def(filename: str, class_name: str | None, name: str) -> ast.FunctionDef:
    tree = _module_ast(filename)
    body: list[ast.stmt] = tree.body
    if class_name is not None:
        classes = [s for s in tree.body if isinstance(s, ast.ClassDef) and s.name == class_name]
        if len(classes) != 1:
            raise Unsupported(f"class {class_name} not found once in {filename}")
        body = classes[0].body
    found = [s for s in body if isinstance(s, ast.FunctionDef) and s.name == name]
    if len(found) != 1:
        raise Unsupported(f"function {name} not found once in {filename}")
    return found[0]


@dataclass
class _Function:
    """A function being executed: its AST, where it came from, and the class for ``super()``."""

    node: ast.FunctionDef
    qualname: str
    filename: str
    globals: dict[str, Any]
    owner: type | None
    loops: dict[int, int] = field(default_factory=dict)  # id(For node) -> ordinal


def _load(owner: type | None, function: FunctionType) -> _Function:
    module = sys.modules[function.__module__]
    filename = _source_file(module)
    node = _function_def(filename, owner.__name__ if owner else None, function.__name__)
    loops = sorted(
        (n for n in ast.walk(node) if isinstance(n, (ast.For, ast.While))),
        key=lambda n: (n.lineno, n.col_offset),
    )
    qualname = f"{owner.__name__}.{node.name}" if owner else node.name
    return _Function(
        node=node,
        qualname=qualname,
        filename=filename,
        globals=vars(module),
        owner=owner,
        loops={id(loop): ordinal for ordinal, loop in enumerate(loops)},
    )


def _method(cls: type, name: str, after: type | None = None) -> _Function:
    """``name`` as ``cls`` (or, for ``super()``, the classes after ``after``) resolves it."""
    mro = list(cls.__mro__)
    if after is not None:
        mro = mro[mro.index(after) + 1 :]
    for klass in mro:
        if name in vars(klass):
            function = vars(klass)[name]
            if not isinstance(function, FunctionType):
                raise Unsupported(f"{klass.__name__}.{name} is not a Python function")
            return _load(klass, function)
    raise Unsupported(f"{cls.__name__} has no method {name}")


#: The checkout: the folder that holds specs/ (this file is specs/proof/source.py).
_CHECKOUT = Path(__file__).resolve().parent.parent.parent


def _is_project_function(value: object) -> bool:
    """A function of the project (the package, specs/, tests/), which is inlined; nothing else."""
    if not isinstance(value, FunctionType):
        return False
    if value.__module__.split(".")[0] in ("verified_queue", "specs"):
        return True
    filename = Path(value.__code__.co_filename).resolve()
    return _CHECKOUT in filename.parents and "site-packages" not in filename.parts


#: What a message builder may call without changing any state.
_PURE_BUILTINS = frozenset(
    {all, any, getattr, hasattr, id, isinstance, issubclass, len, next, repr, str, type}
)


def _builds_only(function: FunctionType, seen: frozenset[str] = frozenset()) -> bool:
    """Whether ``function`` only builds a value: it assigns no attribute or item and calls only
    exception classes, pure builtins and functions of the project that only build too.

    Such a function (``not_linked``, ``already_linked``, ...) in ``raise f(...)`` is not
    executed: only its declared return type, the exception class, matters. Any other is
    inlined, so that an undo it performs is part of what is proved.
    """
    if function.__qualname__ in seen:
        return True
    node = _load(None, function).node
    for inner in ast.walk(node):
        if isinstance(inner, (ast.Delete, ast.Global, ast.Nonlocal)):
            return False
        targets: list[ast.expr] = []
        if isinstance(inner, ast.Assign):
            targets = inner.targets
        elif isinstance(inner, (ast.AugAssign, ast.AnnAssign)):
            targets = [inner.target]
        if any(not isinstance(target, ast.Name) for target in targets):
            return False
        if isinstance(inner, ast.Call):
            if not isinstance(inner.func, ast.Name):
                return False
            called = function.__globals__.get(inner.func.id, getattr(builtins, inner.func.id, None))
            if isinstance(called, type) and issubclass(called, BaseException):
                continue
            if called in _PURE_BUILTINS:
                continue
            if not (
                _is_project_function(called)
                and isinstance(called, FunctionType)
                and _builds_only(called, seen | {function.__qualname__})
            ):
                return False
    return True


def _raised_class(value: object) -> type[BaseException] | None:
    """The class ``raise value(...)`` raises, if known without running ``value``: ``value``
    itself, or, for a function that only builds the exception (it declares an exception
    class as its return type), the one exception class it constructs.

    A builder is judged by the class it builds, not by the class it declares: a builder
    annotated with one class that returns another (mypy allows a subclass) would
    otherwise have its raise compared as the declared class. A builder that constructs
    no exception class, or more than one, is inlined like any other function.
    """
    if isinstance(value, type) and issubclass(value, BaseException):
        return value
    if _is_project_function(value) and isinstance(value, FunctionType) and _builds_only(value):
        returned = typing.get_type_hints(value).get("return")
        built = _exception_classes_built(value)
        if isinstance(returned, type) and issubclass(returned, BaseException) and len(built) == 1:
            return next(iter(built))
    return None


def _exception_classes_built(
    function: FunctionType, seen: frozenset[str] = frozenset()
) -> set[type[BaseException]]:
    """The exception classes ``function`` calls, and those the project functions it calls do.

    Only called on a function :func:`_builds_only` accepts, whose every call is by name.
    """
    if function.__qualname__ in seen:
        return set()
    built: set[type[BaseException]] = set()
    for inner in ast.walk(_load(None, function).node):
        if not (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name)):
            continue
        called = function.__globals__.get(inner.func.id, getattr(builtins, inner.func.id, None))
        if isinstance(called, type) and issubclass(called, BaseException):
            built.add(called)
        elif _is_project_function(called) and isinstance(called, FunctionType):
            built |= _exception_classes_built(called, seen | {function.__qualname__})
    return built
