"""A proof, for queues of every size, that the production queue's operations are correct.

The bounded layers (the exhaustive check, the CrossHair contracts) stop at 7 or 8 blocks. This
module proves with the z3 SMT solver, for every queue length ``n >= 0`` (and every batch
length) at once, that ``popleft``, ``remove``, ``append``, ``popleft_n``, ``append_n`` and
``prepend_n`` of :class:`~verified_queue.FreeBlockQueue`

* preserve the invariants I1 to I4 of ``verified_queue/queue.py``,
* act on the sequence of blocks exactly as :class:`specs.model.ListModel` does: the same
  result, the same exception class, the same new sequence and count,
* leave every link and the count exactly as they were when they raise (for a refused batch,
  after the undo of the blocks already linked),
* touch no block outside the queue except those they are given, and
* never read or write a link of ``None`` nor index a list out of range, so the
  ``except (AttributeError, TypeError)`` handlers around the link reads, and the
  ``InvariantViolation`` paths for a sentinel whose link outside code destroyed, are
  unreachable on a healthy queue.

The heap is symbolic: ``next_free_block`` and ``prev_free_block`` are two z3 arrays from nodes
to nodes (``None`` is one more node), the count is an integer. A ghost array ``at`` lists the
queue's nodes (``at[0]`` the head sentinel, ``at[1..n]`` the model's list, ``at[n + 1]`` the
tail), and ``pos`` is its inverse (``-1`` off the chain); the invariants are quantified
formulas over them (:func:`invariants`).

The operations are not retyped here. :class:`Translator` reads the methods' source with
:mod:`ast` and executes it symbolically: attribute reads and writes of the two links become
array selects and stores, ``self.num_free_blocks`` an integer, ``if`` a fork of the path,
``try`` sends what the body raises to the matching handler, calls to the project's functions
are inlined (in ``raise f(...)`` only the class matters when ``f`` provably only builds the
exception), and ``for`` and ``while`` loops are cut by the invariants of
:data:`LOOP_INVARIANTS`, which z3 checks on entry and across one round. A statement or
expression it does not know raises :class:`Unsupported`: nothing is skipped. So an edit to
``queue.py`` changes what is proved, and a planted bug's method, translated the same way,
fails the proof.

Assumed, not proved (docs/verification.md, "A proof for every size", says the same):

* the arguments have the types the signatures say: blocks are blocks (nodes other than
  ``None``), a count is an exact ``int`` (``type(n) is int``), a batch an exact ``list`` of
  blocks; the ``WrongTypeError`` paths (``count_argument``, ``not_a_block``) are not covered;
* no asynchronous exception (``KeyboardInterrupt`` from a signal) interrupts an operation, so
  the undo that only a signal reaches (``popleft_n``'s ``_relink_taken``) is not covered;
* the heap outside this queue is well formed: a block in no queue is detached, a block in
  another queue has both links set, another queue's sentinel exactly one; ``remove`` is not
  given a block linked in *another* queue (the documented precondition; check mode enforces
  it);
* only exception classes are compared, not messages; loops are proved partially correct
  (``_unlink_run``'s walk back is not proved to end; the ``for`` loops end by construction);
* the translation: Python's semantics of the statements the translator accepts (a list is a
  value with an identity, ``x.next_free_block`` a field), and z3's correctness. The compiled
  build is mypyc's compilation of the same source.

Run ``python -m specs.proof`` (``tox -e proof``) for a report with each operation's time.
"""

from __future__ import annotations

import ast
import builtins
import sys
import time
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any

import z3  # type: ignore[import-untyped, import-not-found, unused-ignore]

from specs.planted_bugs import PLANTED_BUGS
from verified_queue import errors
from verified_queue.queue import FreeBlockQueue

__all__ = [
    "LOOP_INVARIANTS",
    "OPERATIONS",
    "Ghost",
    "Obligation",
    "Result",
    "Translator",
    "Unsupported",
    "invariants",
    "main",
    "prove",
    "prove_operation",
]

# ---------------------------------------------------------------------------------------------
# The symbolic heap and the ghost state
# ---------------------------------------------------------------------------------------------

#: Every object that can sit in a link: blocks, sentinels of every queue, and ``None``.
NODE = z3.DeclareSort("Node")
NONE = z3.Const("None", NODE)
HEAD = z3.Const("head", NODE)
TAIL = z3.Const("tail", NODE)
#: ``isinstance(x, Sentinel)``: the head and tail of this queue or of any other.
IS_SENTINEL = z3.Function("is_sentinel", NODE, z3.BoolSort())
#: A block (not a sentinel) linked in some *other* queue: the model's membership knows it.
LINKED_ELSEWHERE = z3.Function("linked_elsewhere", NODE, z3.BoolSort())

_I = z3.Int("i")
_X = z3.Const("x", NODE)


@dataclass(frozen=True)
class Ghost:
    """The model's list as the chain's nodes: ``at[0]`` head, ``at[1..n]``, ``at[n + 1]`` tail."""

    at: Any  # z3 Array Int -> Node
    pos: Any  # z3 Array Node -> Int, the index in ``at`` or -1
    n: Any  # z3 Int, ``len(model.blocks)``


@dataclass(frozen=True)
class Heap:
    """The two link fields of every node and the queue's count."""

    nxt: Any  # z3 Array Node -> Node
    prv: Any  # z3 Array Node -> Node
    num: Any  # z3 Int


def _forall(variables: list[Any], body: Any, patterns: Sequence[Any] = ()) -> Any:
    """``ForAll`` with trigger patterns where z3 accepts them (not over a lambda or a store)."""
    usable = [p for p in patterns if all(_is_plain(a) for a in _selects(p))]
    return z3.ForAll(variables, body, patterns=usable)


def _selects(term: Any) -> list[Any]:
    return [term.arg(0)] if z3.is_select(term) else []


def _is_plain(array: Any) -> bool:
    return bool(z3.is_const(array))


def _in_chain(ghost: Ghost, index: Any) -> Any:
    return z3.And(index >= 0, index <= ghost.n + 1)


def invariants(heap: Heap, ghost: Ghost) -> list[tuple[str, Any]]:
    """I1 to I4 of ``queue.py`` (and the shape of the heap outside the queue), by name."""
    at, pos, n, i, x = ghost.at, ghost.pos, ghost.n, _I, _X
    nxt, prv = heap.nxt, heap.prv
    outside = z3.And(x != NONE, pos[x] == -1)
    return [
        ("I2: num_free_blocks counts the blocks", z3.And(n >= 0, heap.num == n)),
        (
            "I1: the sentinels end the chain",
            z3.And(at[0] == HEAD, at[n + 1] == TAIL, prv[HEAD] == NONE, nxt[TAIL] == NONE),
        ),
        (
            "I1: every node of the chain is set",
            _forall([i], z3.Implies(_in_chain(ghost, i), at[i] != NONE), patterns=[at[i]]),
        ),
        (
            "I1: forward links follow the chain",
            _forall(
                [i],
                z3.Implies(z3.And(i >= 0, i <= n), nxt[at[i]] == at[i + 1]),
                patterns=[at[i]],
            ),
        ),
        (
            "I1: back links mirror the forward links",
            _forall(
                [i],
                z3.Implies(z3.And(i >= 1, i <= n + 1), prv[at[i]] == at[i - 1]),
                patterns=[at[i]],
            ),
        ),
        (
            "I3: no node appears twice",
            _forall([i], z3.Implies(_in_chain(ghost, i), pos[at[i]] == i), patterns=[at[i]]),
        ),
        (
            "I3: pos is the index in the chain, or -1",
            _forall(
                [x],
                z3.Or(pos[x] == -1, z3.And(pos[x] >= 0, pos[x] <= n + 1, at[pos[x]] == x)),
                patterns=[pos[x]],
            ),
        ),
        (
            "I1: no sentinel between the sentinels",
            _forall(
                [i],
                z3.Implies(z3.And(i >= 1, i <= n), z3.Not(IS_SENTINEL(at[i]))),
                patterns=[at[i]],
            ),
        ),
        (
            "I3: a block of this queue is in no other",
            _forall([x], z3.Implies(pos[x] >= 0, z3.Not(LINKED_ELSEWHERE(x))), patterns=[pos[x]]),
        ),
        (
            "I4: a block in no queue is detached",
            _forall(
                [x],
                z3.Implies(
                    z3.And(outside, z3.Not(IS_SENTINEL(x)), z3.Not(LINKED_ELSEWHERE(x))),
                    z3.And(prv[x] == NONE, nxt[x] == NONE),
                ),
                patterns=[pos[x], nxt[x], prv[x]],
            ),
        ),
        (
            "I1 of other queues: their blocks have both links",
            _forall(
                [x],
                z3.Implies(
                    z3.And(outside, LINKED_ELSEWHERE(x)), z3.And(prv[x] != NONE, nxt[x] != NONE)
                ),
                patterns=[pos[x], nxt[x], prv[x]],
            ),
        ),
        (
            "I4 of other queues: their sentinels have exactly one link",
            _forall(
                [x],
                z3.Implies(z3.And(outside, IS_SENTINEL(x)), z3.Xor(prv[x] == NONE, nxt[x] == NONE)),
                patterns=[pos[x], nxt[x], prv[x]],
            ),
        ),
    ]


def lemmas(heap: Heap, ghost: Ghost) -> list[tuple[str, Any]]:
    """Consequences of the invariants, phrased around a node so that z3 finds them quickly.

    They are proved from :func:`invariants` (obligations of their own) before being assumed.
    """
    pos, n, x = ghost.pos, ghost.n, _X
    return [
        ("None is on no chain", pos[NONE] == -1),
        (
            "the successor of a chain node is the next one",
            _forall(
                [x],
                z3.Implies(z3.And(pos[x] >= 0, pos[x] <= n), pos[heap.nxt[x]] == pos[x] + 1),
                patterns=[pos[x]],
            ),
        ),
        (
            "the predecessor of a chain node is the previous one",
            _forall(
                [x],
                z3.Implies(z3.And(pos[x] >= 1, pos[x] <= n + 1), pos[heap.prv[x]] == pos[x] - 1),
                patterns=[pos[x]],
            ),
        ),
    ]


def _world() -> list[Any]:
    """Facts about the universe that no operation changes."""
    x = _X
    return [
        z3.Distinct(NONE, HEAD, TAIL),
        IS_SENTINEL(HEAD),
        IS_SENTINEL(TAIL),
        z3.Not(IS_SENTINEL(NONE)),
        z3.Not(LINKED_ELSEWHERE(NONE)),
        _forall(
            [x], z3.Implies(LINKED_ELSEWHERE(x), z3.Not(IS_SENTINEL(x))), patterns=[IS_SENTINEL(x)]
        ),
    ]


def _frame(before: Heap, after: Heap, old: Ghost, new: Ghost) -> Any:
    """A node off the chain before and after keeps both links (other queues are untouched)."""
    x = _X
    return _forall(
        [x],
        z3.Implies(
            z3.And(old.pos[x] == -1, new.pos[x] == -1),
            z3.And(after.nxt[x] == before.nxt[x], after.prv[x] == before.prv[x]),
        ),
        patterns=[after.nxt[x], after.prv[x]],
    )


# ---------------------------------------------------------------------------------------------
# The translator: a symbolic executor for the subset of Python the queue's methods are written in
# ---------------------------------------------------------------------------------------------


class Unsupported(Exception):
    """The translator met code it cannot translate; the proof stops rather than skip it."""


@dataclass(frozen=True)
class ListRef:
    """A Python list, by identity; its contents live in :attr:`State.lists`."""

    ident: int


class _Self:
    """The queue the method runs on (``self``)."""


SELF = _Self()


class _Unbound:
    """A local that a loop binds before reading it, and that has no value before the loop."""


UNBOUND = _Unbound()


@dataclass(frozen=True)
class Raised:
    """An exception object bound by ``except ... as name``; only its class is modelled."""

    cls: type[BaseException]


@dataclass
class State:
    """One symbolic path: its condition, the locals, the heap and the lists."""

    path: tuple[Any, ...]
    env: dict[str, Any]
    heap: Heap
    lists: dict[int, tuple[Any, Any]]  # ident -> (z3 Array Int -> Node, z3 Int length)

    def assume(self, condition: Any) -> State:
        """The same state on the path where ``condition`` holds."""
        return State((*self.path, condition), dict(self.env), self.heap, dict(self.lists))


#: One path through an expression: the state after it, its value, the class it raised (or None).
_Path = tuple[State, Any, "type[BaseException] | None"]


@dataclass
class Outcome:
    """How a path leaves a block of statements: it falls through, returns or raises."""

    kind: str  # "fall", "return" or "raise"
    value: Any  # the returned value, or the raised exception class
    state: State
    where: str


@dataclass
class Obligation:
    """A formula z3 must show valid: ``hypotheses`` imply ``goal``."""

    name: str
    where: str
    hypotheses: tuple[Any, ...]
    goal: Any


@dataclass
class _Function:
    """A function being executed: its AST, where it came from, and the class for ``super()``."""

    node: ast.FunctionDef
    qualname: str
    filename: str
    globals: dict[str, Any]
    owner: type | None
    loops: dict[int, int] = field(default_factory=dict)  # id(For node) -> ordinal


@dataclass
class LoopView:
    """What a loop invariant sees: the iteration count, the state now and at the loop's entry."""

    k: Any
    bound: Any
    now: State
    entry: State
    ghost: Ghost
    #: The loop's own ghost variables (see :class:`LoopSpec`), by name.
    extra: dict[str, Any] = field(default_factory=dict)
    #: The locals of the calling functions, innermost caller first.
    callers: tuple[dict[str, Any], ...] = ()
    #: The loop variable's value in this round (a ``for`` loop's).
    target: Any = None

    def local(self, name: str) -> Any:
        """The current value of local variable ``name``."""
        return self.now.env[name]

    def outer(self, name: str) -> Any:
        """The value of ``name`` in the nearest calling function that has it."""
        for env in self.callers:
            if name in env:
                return env[name]
        raise Unsupported(f"loop invariant: no caller has a local {name}")

    def items(self, name: str) -> tuple[Any, Any]:
        """The current contents (array, length) of the list held in local ``name``."""
        ref = self.now.env[name]
        if not isinstance(ref, ListRef):
            raise Unsupported(f"loop invariant: {name} is not a list")
        return self.now.lists[ref.ident]


LoopInvariant = Callable[[LoopView], Any]


@dataclass(frozen=True)
class LoopSpec:
    """A loop invariant with ghost variables: their values on entry, and after each round.

    ``formula`` sees the ghost values in :attr:`LoopView.extra`; ``step`` computes them for
    the next round from the state at the top of a round (the loop variable bound). The ghost
    values of a round that raises stay visible to the callers' invariants as ``$name``
    locals, with the round's count as ``$k``.
    """

    formula: LoopInvariant
    initial: Callable[[LoopView], dict[str, Any]] | None = None
    step: Callable[[LoopView], dict[str, Any]] | None = None


_LINKS = {"next_free_block": "nxt", "prev_free_block": "prv"}
_SENTINEL_FIELDS = {"fake_free_list_head": HEAD, "fake_free_list_tail": TAIL}
_EXCEPTION_HANDLERS_PROVED_UNREACHABLE = (AttributeError, TypeError)

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


_CHECKOUT = Path(__file__).resolve().parent.parent


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
    itself, or the return type of a function that only builds the exception."""
    if isinstance(value, type) and issubclass(value, BaseException):
        return value
    if _is_project_function(value) and isinstance(value, FunctionType) and _builds_only(value):
        returned = typing.get_type_hints(value).get("return")
        if isinstance(returned, type) and issubclass(returned, BaseException):
            return returned
    return None


class Translator:
    """Executes a method's source symbolically, collecting the proof obligations it implies."""

    def __init__(
        self,
        queue_class: type,
        loop_invariants: dict[tuple[str, int], LoopInvariant | LoopSpec],
        ghost: Ghost,
        unroll: int | None = None,
    ) -> None:
        """Prepare to run methods of ``queue_class`` against the pre-state ``ghost``.

        With ``unroll``, loops are not cut by invariants but run round by round, at most
        ``unroll`` rounds (longer paths are dropped): for searching counterexamples only.
        """
        self.queue_class = queue_class
        self.loop_invariants = loop_invariants
        self.ghost = ghost
        self.unroll = unroll
        self.obligations: list[Obligation] = []
        self._next_list = 0
        self._callers: list[dict[str, Any]] = []

    # -- entry ----------------------------------------------------------------------------------

    def run(self, name: str, args: Sequence[Any], state: State) -> list[Outcome]:
        """Run method ``name`` of the queue class on ``args``; one outcome per path."""
        function = _method(self.queue_class, name)
        results = self._call(function, [SELF, *args], state, f"{function.qualname}()")
        outcomes = []
        for result_state, value, raised in results:
            where = f"{Path(function.filename).name}:{function.node.lineno}"
            if raised is not None:
                outcomes.append(Outcome("raise", raised, result_state, where))
            else:
                outcomes.append(Outcome("return", value, result_state, where))
        return outcomes

    def new_list(self, state: State, items: Any, length: Any) -> ListRef:
        """Allocate a list holding ``items[0:length]`` in ``state``."""
        self._next_list += 1
        state.lists[self._next_list] = (items, length)
        return ListRef(self._next_list)

    # -- helpers --------------------------------------------------------------------------------

    def _where(self, function: _Function, node: ast.AST) -> str:
        return f"{Path(function.filename).name}:{getattr(node, 'lineno', '?')}"

    def _oblige(self, state: State, name: str, where: str, goal: Any) -> None:
        self.obligations.append(Obligation(name, where, state.path, goal))

    def _unsupported(self, function: _Function, node: ast.AST, what: str) -> Unsupported:
        return Unsupported(f"{self._where(function, node)} ({function.qualname}): {what}")

    # -- calls ----------------------------------------------------------------------------------

    def _call(
        self,
        function: _Function,
        args: Sequence[Any],
        state: State,
        where: str,
        keywords: dict[str, Any] | None = None,
    ) -> list[_Path]:
        """Inline ``function``; each result is (state, returned value, raised class or None)."""
        spec = function.node.args
        keywords = keywords or {}
        if spec.vararg or spec.kwarg or spec.posonlyargs or spec.defaults or any(spec.kw_defaults):
            raise Unsupported(f"{where}: only parameters without defaults are translated")
        if len(spec.args) != len(args) or sorted(keywords) != sorted(
            p.arg for p in spec.kwonlyargs
        ):
            raise Unsupported(f"{where}: the arguments do not match {function.qualname}'s")
        caller_env = state.env
        inner = State(
            state.path,
            {p.arg: a for p, a in zip(spec.args, args, strict=True)} | keywords,
            state.heap,
            dict(state.lists),
        )
        results: list[_Path] = []
        self._callers.insert(0, caller_env)
        try:
            outcomes = self._block(function.node.body, inner, function, None)
        finally:
            self._callers.pop(0)
        for outcome in outcomes:
            back = State(outcome.state.path, caller_env, outcome.state.heap, outcome.state.lists)
            if outcome.kind == "raise":
                results.append((back, None, outcome.value))
            elif outcome.kind == "return":
                results.append((back, outcome.value, None))
            else:
                results.append((back, NONE, None))
        return results

    # -- statements -----------------------------------------------------------------------------

    def _block(
        self,
        body: Sequence[ast.stmt],
        state: State,
        function: _Function,
        handling: type[BaseException] | None,
    ) -> list[Outcome]:
        running = [state]
        finished: list[Outcome] = []
        for statement in body:
            following: list[State] = []
            for current in running:
                for outcome in self._statement(statement, current, function, handling):
                    if outcome.kind == "fall":
                        following.append(outcome.state)
                    else:
                        finished.append(outcome)
            running = following
        where = self._where(function, body[-1]) if body else "?"
        return finished + [Outcome("fall", None, s, where) for s in running]

    def _statement(  # noqa: PLR0911 -- one return per kind of statement
        self,
        node: ast.stmt,
        state: State,
        function: _Function,
        handling: type[BaseException] | None,
    ) -> list[Outcome]:
        where = self._where(function, node)
        if isinstance(node, ast.Pass):
            return [Outcome("fall", None, state, where)]
        if isinstance(node, ast.Expr):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return [Outcome("fall", None, state, where)]  # a docstring
            return self._then(node.value, state, function, where, lambda s, _v: [s])
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            if node.value is None:
                return [Outcome("fall", None, state, where)]  # a bare annotation
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]

            def assign(after: State, value: Any) -> list[State]:
                for target in targets:
                    after = self._store(target, value, after, function)
                return [after]

            return self._then(node.value, state, function, where, assign)
        if isinstance(node, ast.AugAssign):
            operation = ast.BinOp(left=_as_load(node.target), op=node.op, right=node.value)
            ast.copy_location(operation, node)
            return self._then(
                operation,
                state,
                function,
                where,
                lambda after, value: [self._store(node.target, value, after, function)],
            )
        if isinstance(node, ast.If):
            outcomes: list[Outcome] = []
            for after, value, raised in self._expression(node.test, state, function):
                if raised is not None:
                    outcomes.append(Outcome("raise", raised, after, where))
                    continue
                condition = self._truth(value, function, node)
                if condition is True or condition is False:
                    branch = node.body if condition else node.orelse
                    outcomes += self._block(branch, after, function, handling)
                else:
                    outcomes += self._block(node.body, after.assume(condition), function, handling)
                    outcomes += self._block(
                        node.orelse, after.assume(z3.Not(condition)), function, handling
                    )
            return outcomes
        if isinstance(node, ast.Raise):
            if node.exc is None:
                if handling is None:
                    raise self._unsupported(function, node, "bare raise outside a handler")
                return [Outcome("raise", handling, state, where)]
            if isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name):
                built = self._global(node.exc.func.id, function, node)
                cls = _raised_class(built)
                if cls is not None:
                    # The message is not modelled: only the exception's class is compared.
                    return [Outcome("raise", cls, state, where)]
            # Anything else is evaluated (an undo helper runs) and must yield an exception.
            outcomes = []
            for after, value, raised in self._expression(node.exc, state, function):
                if raised is None and not isinstance(value, Raised):
                    raise self._unsupported(function, node, "raise of a non-exception")
                outcomes.append(Outcome("raise", raised or value.cls, after, where))
            return outcomes
        if isinstance(node, ast.Return):
            if node.value is None:
                return [Outcome("return", NONE, state, where)]
            return self._then(
                node.value,
                state,
                function,
                where,
                lambda after, _value: [after],
                kind="return",
            )
        if isinstance(node, ast.Try):
            return self._try(node, state, function)
        if isinstance(node, (ast.For, ast.While)):
            return self._loop(node, state, function)
        raise self._unsupported(function, node, f"statement {type(node).__name__}")

    def _then(
        self,
        expression: ast.expr,
        state: State,
        function: _Function,
        where: str,
        continuation: Callable[[State, Any], list[State]],
        *,
        kind: str = "fall",
    ) -> list[Outcome]:
        """Evaluate ``expression``, then ``continuation`` on each value; raises pass through."""
        outcomes = []
        for after, value, raised in self._expression(expression, state, function):
            if raised is not None:
                outcomes.append(Outcome("raise", raised, after, where))
                continue
            for final in continuation(after, value):
                outcomes.append(Outcome(kind, value, final, where))
        return outcomes

    def _try(self, node: ast.Try, state: State, function: _Function) -> list[Outcome]:
        if node.orelse or node.finalbody:
            raise self._unsupported(function, node, "try with else or finally")
        handlers: list[tuple[tuple[type[BaseException], ...], str | None, list[ast.stmt]]] = []
        for handler in node.handlers:
            if handler.type is None:
                raise self._unsupported(function, handler, "bare except")
            names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
            caught = []
            for name in names:
                if not isinstance(name, ast.Name):
                    raise self._unsupported(function, handler, "except of an expression")
                cls = self._global(name.id, function, handler)
                if not (isinstance(cls, type) and issubclass(cls, BaseException)):
                    raise self._unsupported(function, handler, f"except {name.id}")
                caught.append(cls)
            handlers.append((tuple(caught), handler.name, handler.body))
        outcomes = []
        for outcome in self._block(node.body, state, function, None):
            if outcome.kind != "raise":
                outcomes.append(outcome)
                continue
            # An exception the body raises explicitly goes to the first matching handler.
            # AttributeError and TypeError are raised by the interpreter only (a link read of
            # None, a block of the wrong type): the first is proved impossible by the
            # obligations of each link read, the second is excluded by the stated assumption.
            for classes, bound_name, body in handlers:
                if issubclass(outcome.value, classes):
                    inside = outcome.state.assume(z3.BoolVal(True))
                    if bound_name is not None:
                        inside.env[bound_name] = Raised(outcome.value)
                    outcomes += self._block(body, inside, function, outcome.value)
                    break
            else:
                outcomes.append(outcome)
        return outcomes

    def _loop(  # noqa: PLR0915 -- the loop rule is one piece: entry, havoc, round, exit
        self, node: ast.For | ast.While, state: State, function: _Function
    ) -> list[Outcome]:
        """Cut a loop with its stated invariant: it must hold on entry and after any round that
        starts where it holds; after the loop only the invariant (and the exit) is known."""
        where = self._where(function, node)
        if node.orelse:
            raise self._unsupported(function, node, "loop with else")
        if self.unroll is not None:
            return self._unrolled(node, state, function)
        key = (function.qualname, function.loops[id(node)])
        found = self.loop_invariants.get(key)
        if found is None:
            raise self._unsupported(function, node, f"no loop invariant for loop {key}")
        spec = found if isinstance(found, LoopSpec) else LoopSpec(found)
        builders = set()
        for inner in ast.walk(node):
            if isinstance(inner, (ast.Break, ast.Continue, ast.Return, ast.Try)):
                raise self._unsupported(function, inner, "break, continue, return or try in a loop")
            if isinstance(inner, ast.Raise) and isinstance(inner.exc, ast.Call):
                builders.add(id(inner.exc))
        items = iterable = None
        bound: Any = None
        target = None
        if isinstance(node, ast.For):
            if not isinstance(node.target, ast.Name):
                raise self._unsupported(function, node, "for with a non-name target")
            target = node.target.id
            iterated = node.iter
            if (
                isinstance(iterated, ast.Call)
                and isinstance(iterated.func, ast.Name)
                and self._global(iterated.func.id, function, node) is range
                and len(iterated.args) == 1
            ):
                ((state, stop, _),) = self._expression(iterated.args[0], state, function)
                if not z3.is_int(stop):
                    raise self._unsupported(function, node, "range of a non-integer")
                bound = z3.If(stop < 0, 0, stop)
            else:
                ((state, iterable, _),) = self._expression(iterated, state, function)
                if not isinstance(iterable, ListRef):
                    raise self._unsupported(
                        function, node, "for over something other than range or a list"
                    )
                items, bound = state.lists[iterable.ident]
        # Everything the body may change is replaced by fresh values constrained by the invariant.
        assigned: set[str] = set()
        writes_heap = writes_count = False
        written_lists: set[int] = set()
        for inner in ast.walk(ast.Module(body=node.body, type_ignores=[])):
            targets: list[ast.expr] = []
            if isinstance(inner, ast.Assign):
                targets = inner.targets
            elif isinstance(inner, (ast.AugAssign, ast.AnnAssign, ast.For)):
                targets = [inner.target]
            for assigned_to in targets:
                if isinstance(assigned_to, ast.Name):
                    assigned.add(assigned_to.id)
                elif isinstance(assigned_to, ast.Attribute) and assigned_to.attr in _LINKS:
                    writes_heap = True
                elif (
                    isinstance(assigned_to, ast.Attribute) and assigned_to.attr == "num_free_blocks"
                ):
                    writes_count = True
                elif isinstance(assigned_to, ast.Subscript) and isinstance(
                    assigned_to.value, ast.Name
                ):
                    ref = state.env.get(assigned_to.value.id)
                    if not isinstance(ref, ListRef):
                        raise self._unsupported(
                            function, assigned_to, "item assignment to a non-list"
                        )
                    written_lists.add(ref.ident)
                else:
                    raise self._unsupported(function, assigned_to, "loop assigns an unknown target")
            # A call could change anything; only those that build an exception to raise are
            # allowed, and they are checked to build only.
            if isinstance(inner, ast.Call) and not (
                id(inner) in builders
                and isinstance(inner.func, ast.Name)
                and _raised_class(self._global(inner.func.id, function, inner)) is not None
            ):
                raise self._unsupported(function, inner, "call inside a loop body")
        if iterable is not None and iterable.ident in written_lists:
            raise self._unsupported(function, node, "a loop writes the list it iterates")
        havoc = State(state.path, dict(state.env), state.heap, dict(state.lists))
        for name in assigned - {target}:
            if name not in state.env:
                # First bound inside the loop: a round must bind it before reading it.
                havoc.env[name] = UNBOUND
                continue
            if not isinstance(state.env[name], z3.ExprRef):
                raise self._unsupported(function, node, f"loop variable {name} is not a value")
            havoc.env[name] = z3.FreshConst(state.env[name].sort(), name)
        if writes_heap or writes_count:
            havoc.heap = Heap(
                z3.FreshConst(state.heap.nxt.sort(), "next") if writes_heap else state.heap.nxt,
                z3.FreshConst(state.heap.prv.sort(), "prev") if writes_heap else state.heap.prv,
                z3.FreshInt("num") if writes_count else state.heap.num,
            )
        for ident in written_lists:
            array, length = state.lists[ident]
            havoc.lists[ident] = (z3.FreshConst(array.sort(), "list"), length)
        if iterable is not None:
            items = havoc.lists[iterable.ident][0]
        callers = tuple(self._callers)

        def view(k: Any, now: State, extra: dict[str, Any]) -> LoopView:
            return LoopView(k, bound, now, state, self.ghost, extra, callers)

        at_entry = view(z3.IntVal(0), state, {})
        initial = spec.initial(at_entry) if spec.initial else {}
        at_entry.extra = initial
        self._oblige(state, f"loop invariant {key} holds on entry", where, spec.formula(at_entry))
        k = z3.FreshInt("k")
        extra = {name: z3.FreshConst(value.sort(), name) for name, value in initial.items()}
        holds = spec.formula(view(k, havoc, extra))
        limits = [k >= 0] if bound is None else [k >= 0, k < bound]
        top = havoc.assume(z3.And(*limits, holds))
        top.env["$k"] = k
        top.env.update({f"${name}": value for name, value in extra.items()})
        outcomes: list[Outcome] = []
        if isinstance(node, ast.For):
            if target is None:
                raise self._unsupported(function, node, "for without a target")
            top.env[target] = k if items is None else items[k]
            rounds = [top]
            exits = [havoc.assume(z3.And(k == bound, holds))]
        else:
            rounds, exits = [], []
            for after, value, raised in self._expression(node.test, top, function):
                condition = self._truth(value, function, node) if raised is None else None
                if raised is not None or isinstance(condition, bool):
                    raise self._unsupported(function, node, "while test of this kind")
                rounds.append(after.assume(condition))
                exits.append(after.assume(z3.Not(condition)))
        for start in rounds:
            at_top = view(k, start, extra)
            at_top.target = start.env.get(target) if target is not None else None
            following = spec.step(at_top) if spec.step else {}
            for outcome in self._block(node.body, start, function, None):
                if outcome.kind == "raise":
                    outcomes.append(outcome)
                    continue
                self._oblige(
                    outcome.state,
                    f"loop invariant {key} is preserved by a round",
                    where,
                    spec.formula(view(k + 1, outcome.state, following)),
                )
        for done in exits:
            if target is not None:
                done.env[target] = z3.FreshConst(NODE if items is not None else z3.IntSort())
            outcomes.append(Outcome("fall", None, done, where))
        return outcomes

    def _unrolled(
        self, node: ast.For | ast.While, state: State, function: _Function
    ) -> list[Outcome]:
        """Run a loop round by round, up to ``self.unroll`` rounds; drop the longer paths."""
        where = self._where(function, node)
        items = None
        target = None
        if isinstance(node, ast.For):
            if not isinstance(node.target, ast.Name):
                raise self._unsupported(function, node, "for with a non-name target")
            target = node.target.id
            iterated = node.iter
            if isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Name):
                if self._global(iterated.func.id, function, node) is not range:
                    raise self._unsupported(function, node, "for over a call other than range")
                ((state, stop, _),) = self._expression(iterated.args[0], state, function)
                bound = z3.If(stop < 0, 0, stop)
            else:
                ((state, iterable, _),) = self._expression(iterated, state, function)
                if not isinstance(iterable, ListRef):
                    raise self._unsupported(function, node, "for over a non-list")
                items, bound = state.lists[iterable.ident]
        outcomes: list[Outcome] = []
        running = [state]
        for round_number in range(self.unroll or 0):
            following: list[State] = []
            for current in running:
                if target is not None:
                    outcomes.append(
                        Outcome("fall", None, current.assume(bound == round_number), where)
                    )
                    starts = [current.assume(bound > round_number)]
                    value = z3.IntVal(round_number) if items is None else items[round_number]
                    starts[0].env[target] = value
                elif isinstance(node, ast.While):
                    starts = []
                    for after, test, raised in self._expression(node.test, current, function):
                        condition = self._truth(test, function, node) if raised is None else None
                        if raised is not None or isinstance(condition, bool):
                            raise self._unsupported(function, node, "while test of this kind")
                        outcomes.append(
                            Outcome("fall", None, after.assume(z3.Not(condition)), where)
                        )
                        starts.append(after.assume(condition))
                for start in starts:
                    for outcome in self._block(node.body, start, function, None):
                        if outcome.kind == "fall":
                            following.append(outcome.state)
                        else:
                            outcomes.append(outcome)
            running = following
        return outcomes

    def _store(self, target: ast.expr, value: Any, state: State, function: _Function) -> State:
        if isinstance(target, ast.Name):
            after = State(state.path, dict(state.env), state.heap, state.lists)
            after.env[target.id] = value
            return after
        if isinstance(target, ast.Attribute):
            ((after, base, _),) = self._expression(target.value, state, function)
            if base is SELF and target.attr == "num_free_blocks":
                if not z3.is_int(value):
                    raise self._unsupported(function, target, "a non-integer count")
                return replace(after, heap=replace(after.heap, num=value))
            if _is_node(base) and target.attr in _LINKS:
                value = self._node(value, function, target)
                self._oblige(
                    after,
                    f"no link write on None ({ast.unparse(target)})",
                    self._where(function, target),
                    base != NONE,
                )
                field_name = _LINKS[target.attr]
                array = getattr(after.heap, field_name)
                return replace(
                    after, heap=replace(after.heap, **{field_name: z3.Store(array, base, value)})
                )
            raise self._unsupported(function, target, f"assignment to {ast.unparse(target)}")
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            ref = state.env.get(target.value.id)
            if not isinstance(ref, ListRef):
                raise self._unsupported(function, target, "item assignment to a non-list")
            ((after, index, _),) = self._expression(target.slice, state, function)
            array, length = after.lists[ref.ident]
            self._oblige(
                after,
                f"list index in range ({ast.unparse(target)})",
                self._where(function, target),
                z3.And(index >= 0, index < length),
            )
            lists = dict(after.lists)
            lists[ref.ident] = (z3.Store(array, index, self._node(value, function, target)), length)
            return State(after.path, after.env, after.heap, lists)
        raise self._unsupported(function, target, f"assignment to {ast.unparse(target)}")

    # -- expressions ----------------------------------------------------------------------------

    def _global(self, name: str, function: _Function, node: ast.AST) -> Any:
        if name in function.globals:
            return function.globals[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise self._unsupported(function, node, f"unknown name {name}")

    def _node(self, value: Any, function: _Function, node: ast.AST) -> Any:
        if not _is_node(value):
            raise self._unsupported(function, node, f"{value!r} is not a block")
        return value

    def _truth(self, value: Any, function: _Function, node: ast.AST) -> Any:
        if isinstance(value, bool):
            return value
        if isinstance(value, z3.BoolRef):
            return value
        raise self._unsupported(function, node, "truth value of a non-boolean")

    def _expression(  # noqa: PLR0911, PLR0915 -- one return per kind of expression
        self, node: ast.expr, state: State, function: _Function
    ) -> list[_Path]:
        """Evaluate ``node``: a list of (state, value, raised class or None), one per path."""
        if isinstance(node, ast.Constant):
            if node.value is None:
                return [(state, NONE, None)]
            if isinstance(node.value, (bool, str)):
                return [(state, node.value, None)]
            if isinstance(node.value, int):
                return [(state, z3.IntVal(node.value), None)]
            raise self._unsupported(function, node, f"constant {node.value!r}")
        if isinstance(node, ast.Name):
            if node.id == "self" and "self" in state.env:
                return [(state, state.env["self"], None)]
            if node.id in state.env:
                if state.env[node.id] is UNBOUND:
                    raise self._unsupported(function, node, f"{node.id} may be unbound here")
                return [(state, state.env[node.id], None)]
            return [(state, self._global(node.id, function, node), None)]
        if isinstance(node, ast.Attribute):
            results: list[_Path] = []
            for after, base, raised in self._expression(node.value, state, function):
                if raised is not None:
                    results.append((after, None, raised))
                elif base is SELF and node.attr in _SENTINEL_FIELDS:
                    results.append((after, _SENTINEL_FIELDS[node.attr], None))
                elif base is SELF and node.attr == "num_free_blocks":
                    results.append((after, after.heap.num, None))
                elif _is_node(base) and node.attr in _LINKS:
                    self._oblige(
                        after,
                        f"no link read of None ({ast.unparse(node)})",
                        self._where(function, node),
                        base != NONE,
                    )
                    results.append((after, getattr(after.heap, _LINKS[node.attr])[base], None))
                else:
                    raise self._unsupported(function, node, f"attribute {ast.unparse(node)}")
            return results
        if isinstance(node, ast.Compare):
            if len(node.ops) != 1:
                raise self._unsupported(function, node, "chained comparison")
            return self._binary(
                node.left, node.comparators[0], state, function, node, op=node.ops[0]
            )
        if isinstance(node, ast.BinOp):
            if (
                isinstance(node.op, ast.Mult)
                and isinstance(node.left, ast.List)
                and len(node.left.elts) == 1
            ):
                results = []
                for after, element, raised in self._expression(node.left.elts[0], state, function):
                    for final, count, raised_too in self._expression(node.right, after, function):
                        if raised or raised_too:
                            raise self._unsupported(function, node, "raise inside [x] * n")
                        filler = self._node(element, function, node)
                        made = State(final.path, final.env, final.heap, dict(final.lists))
                        ref = self.new_list(
                            made, z3.K(z3.IntSort(), filler), z3.If(count < 0, 0, count)
                        )
                        results.append((made, ref, None))
                return results
            return self._binary(node.left, node.right, state, function, node, op=node.op)
        if isinstance(node, ast.BoolOp):
            return self._boolean(node, state, function)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            results = []
            for after, value, raised in self._expression(node.operand, state, function):
                truth = None if raised else self._truth(value, function, node)
                negated = (
                    None if raised else (not truth if isinstance(truth, bool) else z3.Not(truth))
                )
                results.append((after, negated, raised))
            return results
        if isinstance(node, ast.IfExp):
            results = []
            for after, value, raised in self._expression(node.test, state, function):
                if raised is not None:
                    results.append((after, None, raised))
                    continue
                condition = self._truth(value, function, node)
                if isinstance(condition, bool):
                    branch = node.body if condition else node.orelse
                    results += self._expression(branch, after, function)
                else:
                    results += self._expression(node.body, after.assume(condition), function)
                    results += self._expression(
                        node.orelse, after.assume(z3.Not(condition)), function
                    )
            return results
        if isinstance(node, ast.Call):
            return self._call_expression(node, state, function)
        if isinstance(node, ast.Tuple) and all(isinstance(e, ast.Name) for e in node.elts):
            values = tuple(self._expression(e, state, function)[0][1] for e in node.elts)
            if all(isinstance(v, type) for v in values):
                return [(state, values, None)]
        raise self._unsupported(function, node, f"expression {type(node).__name__}")

    def _boolean(self, node: ast.BoolOp, state: State, function: _Function) -> list[_Path]:
        # Short-circuit: a later operand is evaluated, and its link reads obliged, only on the
        # path where the earlier ones did not decide the result.
        is_and = isinstance(node.op, ast.And)
        ((after, value, raised),) = self._expression(node.values[0], state, function)
        if raised is not None:
            raise self._unsupported(function, node, "raise inside a boolean operator")
        combined = self._truth(value, function, node)
        for operand in node.values[1:]:
            if isinstance(combined, bool):
                if combined != is_and:
                    return [(after, combined, None)]
                ((after, value, raised),) = self._expression(operand, after, function)
                combined = self._truth(value, function, node)
                continue
            guard = combined if is_and else z3.Not(combined)
            (result,) = self._expression(operand, after.assume(guard), function)
            inner, value, raised = result
            if raised is not None or inner.heap is not after.heap:
                raise self._unsupported(function, node, "side effects inside a boolean operator")
            truth = self._truth(value, function, node)
            truth = z3.BoolVal(truth) if isinstance(truth, bool) else truth
            combined = z3.And(combined, truth) if is_and else z3.Or(combined, truth)
        return [(after, combined, None)]

    def _binary(
        self,
        left_node: ast.expr,
        right_node: ast.expr,
        state: State,
        function: _Function,
        node: ast.expr,
        *,
        op: ast.AST,
    ) -> list[_Path]:
        if (
            isinstance(left_node, ast.Call)
            and isinstance(left_node.func, ast.Name)
            and self._global(left_node.func.id, function, node) is type
            and isinstance(op, ast.Is)
        ):
            # ``type(x) is int`` / ``type(x) is list``: by the stated assumption, an argument
            # is exactly of its declared type, which the symbolic value's kind records.
            ((after, value, _),) = self._expression(left_node.args[0], state, function)
            ((after, expected, _),) = self._expression(right_node, after, function)
            actual = int if z3.is_int(value) else list if isinstance(value, ListRef) else None
            if actual is None or expected not in (int, list):
                raise self._unsupported(function, node, "type() test of this kind")
            return [(after, actual is expected, None)]
        results: list[_Path] = []
        for after, left, raised in self._expression(left_node, state, function):
            if raised is not None:
                raise self._unsupported(function, node, "raise inside an operator")
            for final, right, raised_too in self._expression(right_node, after, function):
                if raised_too is not None:
                    raise self._unsupported(function, node, "raise inside an operator")
                results.append((final, self._apply(op, left, right, function, node), None))
        return results

    def _apply(self, op: ast.AST, left: Any, right: Any, function: _Function, node: ast.AST) -> Any:
        if isinstance(op, (ast.Is, ast.IsNot)):
            if _is_node(left) and _is_node(right):
                return left == right if isinstance(op, ast.Is) else left != right
            if isinstance(left, (str, bool, type)) and isinstance(right, (str, bool, type)):
                return (left is right) == isinstance(op, ast.Is)
            raise self._unsupported(function, node, "identity test of these values")
        if isinstance(left, str) and isinstance(right, str) and isinstance(op, (ast.Eq, ast.NotEq)):
            return (left == right) == isinstance(op, ast.Eq)
        if z3.is_int(left) and z3.is_int(right):
            arithmetic: dict[type, Callable[[Any, Any], Any]] = {
                ast.Add: lambda a, b: a + b,
                ast.Sub: lambda a, b: a - b,
                ast.Gt: lambda a, b: a > b,
                ast.GtE: lambda a, b: a >= b,
                ast.Lt: lambda a, b: a < b,
                ast.LtE: lambda a, b: a <= b,
                ast.Eq: lambda a, b: a == b,
                ast.NotEq: lambda a, b: a != b,
            }
            if type(op) in arithmetic:
                return arithmetic[type(op)](left, right)
        raise self._unsupported(function, node, f"operator {type(op).__name__} on these values")

    def _call_expression(  # noqa: PLR0915 -- one branch per kind of callee
        self, node: ast.Call, state: State, function: _Function
    ) -> list[_Path]:
        callee: _Function | None = None
        bound: list[Any] = []
        if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Call):
            inner = node.func.value
            if (
                isinstance(inner.func, ast.Name)
                and inner.func.id == "super"
                and not inner.args
                and function.owner is not None
            ):
                callee = _method(self.queue_class, node.func.attr, after=function.owner)
                bound = [SELF]
        elif isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
            if state.env.get(node.func.value.id) is SELF:
                callee = _method(self.queue_class, node.func.attr)
                bound = [SELF]
        elif isinstance(node.func, ast.Name) and node.func.id not in state.env:
            target = self._global(node.func.id, function, node)
            if target is typing.cast and len(node.args) == 2:
                return self._expression(node.args[1], state, function)
            if target is len and len(node.args) == 1:
                results: list[_Path] = []
                for after, value, _ in self._expression(node.args[0], state, function):
                    if not isinstance(value, ListRef):
                        raise self._unsupported(function, node, "len of a non-list")
                    results.append((after, after.lists[value.ident][1], None))
                return results
            if target is list and len(node.args) == 1:
                results = []
                for after, value, _ in self._expression(node.args[0], state, function):
                    if not isinstance(value, ListRef):
                        raise self._unsupported(function, node, "list() of a non-list")
                    copy = State(after.path, after.env, after.heap, dict(after.lists))
                    results.append((copy, self.new_list(copy, *after.lists[value.ident]), None))
                return results
            if target is isinstance and len(node.args) == 2:
                ((after, value, _),) = self._expression(node.args[0], state, function)
                ((after, classes, _),) = self._expression(node.args[1], after, function)
                if not isinstance(value, Raised):
                    raise self._unsupported(function, node, "isinstance of a non-exception")
                return [(after, issubclass(value.cls, classes), None)]
            cls = _raised_class(target)
            if cls is not None:
                return [(state, Raised(cls), None)]  # an exception built, not raised
            if _is_project_function(target):
                callee = _load(None, target)
        if callee is None:
            raise self._unsupported(function, node, f"call of {ast.unparse(node.func)}")
        if any(keyword.arg is None for keyword in node.keywords):
            raise self._unsupported(function, node, "** argument")
        # Evaluate the arguments left to right, then inline the callee on each path.
        paths: list[tuple[State, list[Any]]] = [(state, list(bound))]
        for argument in [*node.args, *(keyword.value for keyword in node.keywords)]:
            if isinstance(argument, ast.Starred):
                raise self._unsupported(function, node, "starred argument")
            extended = []
            for current, values in paths:
                for after, value, raised in self._expression(argument, current, function):
                    if raised is not None:
                        raise self._unsupported(function, node, "raise inside an argument")
                    extended.append((after, [*values, value]))
            paths = extended
        names = [str(keyword.arg) for keyword in node.keywords]
        results = []
        for current, values in paths:
            positional = values[: len(values) - len(names)]
            keywords = dict(zip(names, values[len(positional) :], strict=True))
            results += self._call(
                callee, positional, current, self._where(function, node), keywords
            )
        return results


def _is_node(value: object) -> bool:
    return isinstance(value, z3.ExprRef) and value.sort() == NODE


def _as_load(target: ast.expr) -> ast.expr:
    """``target`` of an augmented assignment, as the expression that reads it."""
    copy = ast.parse(ast.unparse(target), mode="eval").body
    return ast.copy_location(copy, target)


# ---------------------------------------------------------------------------------------------
# The list model's semantics on the ghost, and the obligations for each operation
# ---------------------------------------------------------------------------------------------


@dataclass
class Case:
    """One case of the model: when it applies, and what the model does then."""

    name: str
    condition: Any
    raises: type[BaseException] | None = None
    ghost: Ghost | None = None  # the model's new list, when it returns
    result: Callable[[Any, State], list[tuple[str, Any]]] | None = None
    #: The blocks the model's call takes out, as a predicate on nodes (they must be detached).
    dropped: Callable[[Any], Any] | None = None


def _popleft_cases(ghost: Ghost, _args: Sequence[Any]) -> list[Case]:
    at, pos, n = ghost.at, ghost.pos, ghost.n
    i, x = z3.Int("j"), z3.Const("y", NODE)
    # ListModel.popleft: ``blocks.pop(0)``, or EmptyQueueError on an empty list.
    after = Ghost(
        z3.Lambda([i], z3.If(i == 0, HEAD, at[i + 1])),
        z3.Lambda([x], z3.If(pos[x] == 1, -1, z3.If(pos[x] > 1, pos[x] - 1, pos[x]))),
        n - 1,
    )
    return [
        Case("empty", n == 0, raises=errors.EmptyQueueError),
        Case(
            "not empty",
            n > 0,
            ghost=after,
            result=lambda value, _state: [("returns the front block", value == at[1])],
            dropped=lambda node: node == at[1],
        ),
    ]


def _remove_cases(ghost: Ghost, args: Sequence[Any]) -> list[Case]:
    at, pos, n = ghost.at, ghost.pos, ghost.n
    (block,) = args
    k = pos[block]
    i, x = z3.Int("j"), z3.Const("y", NODE)
    # ListModel.remove: ``del blocks[index]`` for the block itself, else NotInQueueError.
    after = Ghost(
        z3.Lambda([i], z3.If(i < k, at[i], at[i + 1])),
        z3.Lambda([x], z3.If(x == block, -1, z3.If(pos[x] > k, pos[x] - 1, pos[x]))),
        n - 1,
    )
    member = z3.And(k >= 1, k <= n)
    return [
        Case("block not in the queue", z3.Not(member), raises=errors.NotInQueueError),
        Case(
            "block in the queue",
            member,
            ghost=after,
            result=lambda value, _state: [("returns None", value == NONE)],
            dropped=lambda node: node == block,
        ),
    ]


def _append_cases(ghost: Ghost, args: Sequence[Any]) -> list[Case]:
    at, pos, n = ghost.at, ghost.pos, ghost.n
    (block,) = args
    # ListModel.append: refused for a sentinel or a block linked in any queue (a double free).
    refused = z3.Or(
        IS_SENTINEL(block), LINKED_ELSEWHERE(block), z3.And(pos[block] >= 1, pos[block] <= n)
    )
    after = Ghost(
        z3.Store(z3.Store(at, n + 1, block), n + 2, TAIL),
        z3.Store(z3.Store(pos, block, n + 1), TAIL, n + 2),
        n + 1,
    )
    return [
        Case("sentinel or linked block", refused, raises=errors.AlreadyInQueueError),
        Case(
            "detached block",
            z3.Not(refused),
            ghost=after,
            result=lambda value, _state: [("returns None", value == NONE)],
        ),
    ]


def _popleft_n_cases(ghost: Ghost, args: Sequence[Any]) -> list[Case]:
    at, pos, n = ghost.at, ghost.pos, ghost.n
    (count,) = args
    i, x = z3.Int("j"), z3.Const("y", NODE)
    # ListModel.popleft_n: EmptyQueueError if count > n, else NegativeCountError if count < 0,
    # else ``blocks[:count]`` returned and ``blocks[count:]`` kept.
    after = Ghost(
        z3.Lambda([i], z3.If(i == 0, HEAD, at[i + count])),
        z3.Lambda(
            [x],
            z3.If(
                z3.And(pos[x] >= 1, pos[x] <= count),
                -1,
                z3.If(pos[x] > count, pos[x] - count, pos[x]),
            ),
        ),
        n - count,
    )

    def result(value: Any, state: State) -> list[tuple[str, Any]]:
        if not isinstance(value, ListRef):
            return [("returns a list", z3.BoolVal(False))]
        items, length = state.lists[value.ident]
        j = z3.Int("j")
        return [
            ("returns a list of count blocks", length == count),
            (
                "returns the first count blocks, front first",
                _forall([j], z3.Implies(z3.And(j >= 0, j < count), items[j] == at[j + 1])),
            ),
        ]

    return [
        Case("count > len", count > n, raises=errors.EmptyQueueError),
        Case("count < 0", z3.And(count <= n, count < 0), raises=errors.NegativeCountError),
        Case(
            "0 <= count <= len",
            z3.And(count >= 0, count <= n),
            ghost=after,
            result=result,
            dropped=lambda node: z3.And(pos[node] >= 1, pos[node] <= count),
        ),
    ]


def _admissible(ghost: Ghost, node: Any) -> Any:
    """What ListModel's batches accept, besides not repeating: no sentinel, linked nowhere."""
    return z3.And(ghost.pos[node] == -1, z3.Not(IS_SENTINEL(node)), z3.Not(LINKED_ELSEWHERE(node)))


def _batch_cases(front: bool) -> Callable[[Ghost, Sequence[Any]], list[Case]]:
    """ListModel.append_n (``front=False``) or prepend_n: all or nothing."""

    def cases(ghost: Ghost, args: Sequence[Any]) -> list[Case]:
        at, pos, n = ghost.at, ghost.pos, ghost.n
        ((items, length),) = args
        i, j, y = z3.Int("i"), z3.Int("j"), z3.Const("y", NODE)
        in_batch = z3.And(j >= 0, j < length)
        every_admissible = _forall(
            [j], z3.Implies(in_batch, _admissible(ghost, items[j])), patterns=[items[j]]
        )
        distinct = z3.ForAll(
            [i, j],
            z3.Implies(z3.And(in_batch, i >= 0, i < length, items[i] == items[j]), i == j),
        )
        # The position of each block in the batch: it exists exactly when no block repeats,
        # so assuming it where the model accepts the batch loses no case.
        index = z3.Array("batch_index", NODE, z3.IntSort())
        inverse = z3.And(
            _forall([j], z3.Implies(in_batch, index[items[j]] == j), patterns=[items[j]]),
            _forall(
                [y],
                z3.Or(
                    index[y] == -1,
                    z3.And(index[y] >= 0, index[y] < length, items[index[y]] == y),
                ),
                patterns=[index[y]],
            ),
        )
        if front:
            after = Ghost(
                z3.Lambda(
                    [i], z3.If(i == 0, HEAD, z3.If(i <= length, items[i - 1], at[i - length]))
                ),
                z3.Lambda(
                    [y],
                    z3.If(index[y] >= 0, index[y] + 1, z3.If(pos[y] >= 1, pos[y] + length, pos[y])),
                ),
                n + length,
            )
        else:
            after = Ghost(
                z3.Lambda(
                    [i], z3.If(i <= n, at[i], z3.If(i <= n + length, items[i - n - 1], TAIL))
                ),
                z3.Lambda(
                    [y],
                    z3.If(
                        y == TAIL, n + length + 1, z3.If(index[y] >= 0, n + 1 + index[y], pos[y])
                    ),
                ),
                n + length,
            )
        return [
            Case(
                "a block is a sentinel, linked or repeated",
                z3.Not(z3.And(every_admissible, distinct)),
                raises=errors.AlreadyInQueueError,
            ),
            Case(
                "every block may join",
                z3.And(every_admissible, distinct, inverse),
                ghost=after,
                result=lambda value, _state: [("returns None", value == NONE)],
            ),
        ]

    return cases


@dataclass(frozen=True)
class Operation:
    """An operation to prove: its arguments' kinds and the model's cases."""

    name: str
    arguments: tuple[str, ...]  # "block" or "count"
    cases: Callable[[Ghost, Sequence[Any]], list[Case]]
    #: Arguments the precondition excludes, beyond their types.
    precondition: Callable[[Ghost, Sequence[Any]], Any] | None = None


def _remove_precondition(_ghost: Ghost, args: Sequence[Any]) -> Any:
    # The documented precondition: not a block linked in *another* queue, which the
    # production queue cannot tell in O(1) (check mode refuses it).
    return z3.Not(LINKED_ELSEWHERE(args[0]))


OPERATIONS: dict[str, Operation] = {
    "popleft": Operation("popleft", (), _popleft_cases),
    "remove": Operation("remove", ("block",), _remove_cases, _remove_precondition),
    "append": Operation("append", ("block",), _append_cases),
    "popleft_n": Operation("popleft_n", ("count",), _popleft_n_cases),
    "append_n": Operation("append_n", ("batch",), _batch_cases(front=False)),
    "prepend_n": Operation("prepend_n", ("batch",), _batch_cases(front=True)),
}


def _popleft_n_detach(view: LoopView) -> Any:
    """popleft_n's loop after k rounds: ``popped[:k]`` holds the first k blocks, now detached.

    ``block`` is the next block of the chain; every other link is as it was at the loop's entry.
    """
    at, pos = view.ghost.at, view.ghost.pos
    items, _length = view.items("popped")
    now, entry = view.now.heap, view.entry.heap
    j, y = z3.Int("j"), z3.Const("y", NODE)
    done = z3.And(pos[y] >= 1, pos[y] <= view.k)
    return z3.And(
        view.local("block") == at[view.k + 1],
        _forall([j], z3.Implies(z3.And(j >= 0, j < view.k), items[j] == at[j + 1])),
        _forall(
            [y],
            z3.If(
                done,
                z3.And(now.nxt[y] == NONE, now.prv[y] == NONE),
                z3.And(now.nxt[y] == entry.nxt[y], now.prv[y] == entry.prv[y]),
            ),
            patterns=[now.nxt[y], now.prv[y]],
        ),
    )


def _batch_link(view: LoopView) -> Any:
    """append_n's and prepend_n's loop after k rounds: ``batch[:k]`` is linked after ``before``.

    Each of them was admissible and is new (``index`` numbers them: no repeat), and is linked
    behind the previous one; ``last`` is the last linked; the last one's forward link is still
    None and the block after the run still names ``before``: nothing else changed.
    """
    items, _length = view.items("batch")
    k, pos = view.k, view.ghost.pos
    before = view.entry.env["last"]
    index = view.extra["index"]
    now, entry = view.now.heap, view.entry.heap
    j, y = z3.Int("j"), z3.Const("y", NODE)
    linked = z3.And(
        _admissible(view.ghost, items[j]),
        index[items[j]] == j,
        now.prv[items[j]] == z3.If(j == 0, before, items[j - 1]),
        now.nxt[items[j]] == z3.If(j + 1 < k, items[j + 1], NONE),
    )
    return z3.And(
        pos[before] >= 0,
        view.local("last") == z3.If(k == 0, before, items[k - 1]),
        now.nxt[before] == z3.If(k == 0, entry.nxt[before], items[0]),
        now.prv[before] == entry.prv[before],
        _forall([j], z3.Implies(z3.And(j >= 0, j < k), linked), patterns=[items[j]]),
        _forall(
            [y],
            z3.Or(index[y] == -1, z3.And(index[y] >= 0, index[y] < k, items[index[y]] == y)),
            patterns=[index[y]],
        ),
        _forall(
            [y],
            z3.Implies(
                z3.And(index[y] == -1, y != before),
                z3.And(now.nxt[y] == entry.nxt[y], now.prv[y] == entry.prv[y]),
            ),
            patterns=[now.nxt[y], now.prv[y]],
        ),
    )


_BATCH_LOOP = LoopSpec(
    _batch_link,
    initial=lambda _view: {"index": z3.K(NODE, z3.IntVal(-1))},
    step=lambda view: {"index": z3.Store(view.extra["index"], view.target, view.k)},
)


def _batch_unlink(view: LoopView) -> Any:
    """_unlink_run's loop after t rounds: the last t blocks the failed batch linked are detached.

    It walks back from the batch's ``last`` to ``before_run``; the batch loop's round count
    ``$k`` and numbering ``$index`` at the raise say which blocks those are.
    """
    ref = view.outer("batch")
    if not isinstance(ref, ListRef):
        raise Unsupported("the undo's caller has no batch list")
    items, _length = view.now.lists[ref.ident]
    k, index, t = view.outer("$k"), view.outer("$index"), view.k
    before = view.local("before_run")
    now, raised = view.now.heap, view.entry.heap
    j, y = z3.Int("j"), z3.Const("y", NODE)
    return z3.And(
        t <= k,
        view.local("block") == z3.If(t == k, before, items[k - 1 - t]),
        _forall(
            [j],
            z3.Implies(
                z3.And(k - t <= j, j < k),
                z3.And(now.nxt[items[j]] == NONE, now.prv[items[j]] == NONE),
            ),
            patterns=[items[j]],
        ),
        _forall(
            [y],
            z3.Implies(
                z3.Not(z3.And(index[y] >= 0, index[y] >= k - t)),
                z3.And(now.nxt[y] == raised.nxt[y], now.prv[y] == raised.prv[y]),
            ),
            patterns=[now.nxt[y], now.prv[y]],
        ),
    )


#: The loop invariants, by (function, loop's ordinal in it); each is checked, not trusted.
LOOP_INVARIANTS: dict[tuple[str, int], LoopInvariant | LoopSpec] = {
    ("FreeBlockQueue.popleft_n", 0): _popleft_n_detach,
    ("FreeBlockQueue.append_n", 0): _BATCH_LOOP,
    ("FreeBlockQueue.prepend_n", 0): _BATCH_LOOP,
    ("_unlink_run", 0): _batch_unlink,
}


def _case_goals(case: Case, outcome: Outcome, heap: Heap, ghost: Ghost) -> list[tuple[str, Any]]:
    """What the code's ``outcome`` must satisfy where the model's ``case`` applies."""
    after = outcome.state.heap
    if case.raises is not None:
        expected = case.raises.__name__
        if outcome.kind != "raise":
            return [(f"raises {expected} as the model does (the code returns)", z3.BoolVal(False))]
        return [
            (
                f"raises {expected} as the model does (the code raises {outcome.value.__name__})",
                z3.BoolVal(outcome.value is case.raises),
            ),
            (
                "a refused call changes no link",
                z3.And(after.nxt == heap.nxt, after.prv == heap.prv),
            ),
            ("a refused call keeps the count", after.num == heap.num),
        ]
    if outcome.kind != "return":
        raised = outcome.value.__name__
        return [(f"returns as the model does (the code raises {raised})", z3.BoolVal(False))]
    if case.ghost is None or case.result is None:
        raise Unsupported(f"the case {case.name!r} returns but names no new list or result")
    goals = case.result(outcome.value, outcome.state)
    goals += [
        (f"{goal_name} afterwards (on the model's new list)", goal)
        for goal_name, goal in invariants(after, case.ghost)
    ]
    goals.append(("no node outside the queue changes", _frame(heap, after, ghost, case.ghost)))
    if case.dropped is not None:
        # Implied by I4 afterwards, but stated on its own so that a failure names it.
        y = z3.Const("y", NODE)
        detached = z3.And(after.nxt[y] == NONE, after.prv[y] == NONE)
        goals.append(
            (
                "the blocks taken out are detached",
                _forall([y], z3.Implies(case.dropped(y), detached)),
            )
        )
    return goals


def _symbolic_state() -> tuple[Heap, Ghost]:
    ghost = Ghost(
        z3.Array("at", z3.IntSort(), NODE), z3.Array("pos", NODE, z3.IntSort()), z3.Int("n")
    )
    heap = Heap(
        z3.Array("next", NODE, NODE), z3.Array("prev", NODE, NODE), z3.Int("num_free_blocks")
    )
    return heap, ghost


def lemma_obligations() -> list[Obligation]:
    """Each lemma follows from the invariants on every queue."""
    heap, ghost = _symbolic_state()
    healthy = tuple(_world() + [formula for _name, formula in invariants(heap, ghost)])
    return [
        Obligation(f"lemma: {name}", "specs/proof.py", healthy, formula)
        for name, formula in lemmas(heap, ghost)
    ]


def prove_operation(
    name: str,
    queue_class: type = FreeBlockQueue,
    loop_invariants: dict[tuple[str, int], LoopInvariant | LoopSpec] | None = None,
    unroll: int | None = None,
) -> list[Obligation]:
    """Translate ``queue_class.name`` and list its obligations: the code's, and the model's.

    ``unroll`` runs loops for at most that many rounds instead of cutting them with their
    invariants (see :func:`find_counterexample`).
    """
    operation = OPERATIONS[name]
    heap, ghost = _symbolic_state()
    pre = _world() + [formula for _name, formula in invariants(heap, ghost)]
    # The lemmas are proved once, by lemma_obligations(), and assumed here.
    pre += [formula for _name, formula in lemmas(heap, ghost)]
    args: list[Any] = []  # what the method receives
    spec_args: list[Any] = []  # what the model's cases read
    lists: dict[int, tuple[Any, Any]] = {}
    for kind in operation.arguments:
        if kind == "block":
            block = z3.Const("block", NODE)
            pre.append(block != NONE)  # assumed: a block, not None
            args.append(block)
            spec_args.append(block)
        elif kind == "count":
            count = z3.Int("count")  # assumed: exactly an int
            args.append(count)
            spec_args.append(count)
        else:  # a batch: assumed exactly a list, of blocks
            items, length = z3.Array("batch", z3.IntSort(), NODE), z3.Int("length")
            j = z3.Int("j")
            pre.append(length >= 0)
            pre.append(
                _forall(
                    [j],
                    z3.Implies(z3.And(j >= 0, j < length), items[j] != NONE),
                    patterns=[items[j]],
                )
            )
            lists[0] = (items, length)
            args.append(ListRef(0))
            spec_args.append((items, length))
    if operation.precondition is not None:
        pre.append(operation.precondition(ghost, spec_args))
    translator = Translator(queue_class, loop_invariants or LOOP_INVARIANTS, ghost, unroll)
    start = State(tuple(pre), {}, heap, lists)
    outcomes = translator.run(name, args, start)
    goals = list(translator.obligations)
    for case in operation.cases(ghost, spec_args):
        for outcome in outcomes:
            hypotheses = (*outcome.state.path, case.condition)
            for goal_name, goal in _case_goals(case, outcome, heap, ghost):
                goals.append(
                    Obligation(f"{name}: {case.name}: {goal_name}", outcome.where, hypotheses, goal)
                )
    return goals


@dataclass
class Result:
    """The verdict on one obligation."""

    operation: str
    name: str
    where: str
    verdict: str  # "proved", "counterexample" or "unknown"
    seconds: float
    counterexample: str = ""


def _describe_model(model: Any) -> str:
    """The sizes and the argument of a counterexample, in one line."""
    heap, ghost = _symbolic_state()
    names = {declaration.name() for declaration in model.decls()}
    shown = [f"len(queue)={model.eval(ghost.n, model_completion=True)}"]
    shown.append(f"num_free_blocks={model.eval(heap.num, model_completion=True)}")
    if "block" in names:
        where = model.eval(ghost.pos[z3.Const("block", NODE)], model_completion=True)
        shown.append(f"block at position {where} (0 head, -1 outside the queue)")
    for argument in ("count", "length"):
        if argument in names:
            shown.append(f"{argument}={model.eval(z3.Int(argument))}")
    return ", ".join(shown)


def concrete_queue(size: int, heap: Heap, ghost: Ghost) -> list[Any]:
    """Facts that pin the symbolic state to one queue of ``size`` blocks ``b1``, ``b2``, ...

    The universe is the chain, two detached blocks ``d1`` and ``d2``, and None; the only
    sentinels are this queue's, no block is in another queue. Under these facts z3 decides the
    obligations at once, where it may time out searching a model over all sizes.
    """
    blocks = [z3.Const(f"b{i}", NODE) for i in range(1, size + 1)]
    detached = [z3.Const(f"d{i}", NODE) for i in (1, 2)]
    chain = [HEAD, *blocks, TAIL]
    at, pos = z3.K(z3.IntSort(), TAIL), z3.K(NODE, z3.IntVal(-1))
    following, preceding = z3.K(NODE, NONE), z3.K(NODE, NONE)
    for index, member in enumerate(chain):
        at, pos = z3.Store(at, index, member), z3.Store(pos, member, index)
        if index + 1 < len(chain):
            following = z3.Store(following, member, chain[index + 1])
            preceding = z3.Store(preceding, chain[index + 1], member)
    x = _X
    universe = [NONE, *chain, *detached]
    return [
        z3.Distinct(*universe),
        z3.ForAll([x], z3.Or([x == member for member in universe])),
        z3.ForAll([x], IS_SENTINEL(x) == z3.Or(x == HEAD, x == TAIL)),
        z3.ForAll([x], z3.Not(LINKED_ELSEWHERE(x))),
        ghost.at == at,
        ghost.pos == pos,
        ghost.n == size,
        heap.nxt == following,
        heap.prv == preceding,
        heap.num == size,
    ]


def find_counterexample(
    name: str,
    queue_class: type = FreeBlockQueue,
    sizes: Iterable[int] = range(4),
    rounds: int = 3,
    timeout_ms: int = 5_000,
) -> Result | None:
    """Search a concrete counterexample: queues of each of ``sizes``, loops of up to ``rounds``.

    Where the proof over all sizes reports an obligation unproved because z3 ran out of time
    building a model, this bounded search usually finds one at once. Loops run instead of
    being cut, so the loop invariants play no part: a counterexample found here is an
    execution of the code (up to the assumptions) that the model disagrees with.
    """
    heap, ghost = _symbolic_state()
    for size in sizes:
        facts = concrete_queue(size, heap, ghost)
        if "batch" in OPERATIONS[name].arguments:
            # A batch short enough for the unrolled loop, its blocks any of the universe.
            items = z3.K(z3.IntSort(), NONE)
            for index in range(rounds - 1):
                items = z3.Store(items, index, z3.Const(f"item{index}", NODE))
            facts.append(z3.Array("batch", z3.IntSort(), NODE) == items)
            facts.append(z3.Int("length") < rounds)
        for obligation in prove_operation(name, queue_class, unroll=rounds):
            pinned = Obligation(
                obligation.name,
                obligation.where,
                (*obligation.hypotheses, *facts),
                obligation.goal,
            )
            verdict, seconds, detail = check(pinned, timeout_ms)
            if verdict == "counterexample":
                return Result(name, obligation.name, obligation.where, verdict, seconds, detail)
    return None


def check(obligation: Obligation, timeout_ms: int = 20_000) -> tuple[str, float, str]:
    """Ask z3 whether ``obligation`` is valid: proved, a counterexample, or unknown."""
    solver = z3.Solver()
    solver.set("timeout", timeout_ms)
    solver.add(*obligation.hypotheses)
    solver.add(z3.Not(obligation.goal))
    started = time.perf_counter()
    answer = solver.check()
    seconds = time.perf_counter() - started
    if answer == z3.unsat:
        return "proved", seconds, ""
    if answer == z3.sat:
        return "counterexample", seconds, _describe_model(solver.model())
    return "unknown", seconds, solver.reason_unknown()


def obligations(
    name: str,
    queue_class: type = FreeBlockQueue,
    loop_invariants: dict[tuple[str, int], LoopInvariant | LoopSpec] | None = None,
) -> list[Obligation]:
    """The obligations of operation ``name`` on ``queue_class``, or of ``"lemmas"``."""
    if name == "lemmas":
        return lemma_obligations()
    return prove_operation(name, queue_class, loop_invariants)


def prove(
    names: Iterable[str] = ("lemmas", *OPERATIONS),
    queue_class: type = FreeBlockQueue,
    stop_at_first_failure: bool = False,
    timeout_ms: int = 20_000,
    loop_invariants: dict[tuple[str, int], LoopInvariant | LoopSpec] | None = None,
) -> list[Result]:
    """Check every obligation of ``names`` (operations, or ``"lemmas"``); one result each.

    ``loop_invariants`` replaces :data:`LOOP_INVARIANTS` (a planted bug's loops have names of
    their own).
    """
    results: list[Result] = []
    for name in names:
        for obligation in obligations(name, queue_class, loop_invariants):
            verdict, seconds, detail = check(obligation, timeout_ms)
            results.append(
                Result(name, obligation.name, obligation.where, verdict, seconds, detail)
            )
            if stop_at_first_failure and verdict != "proved":
                return results
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Prove the lemmas and every operation, one line each; exit 1 unless all is proved.

    ``--verbose`` lists every obligation with its time; ``--bug NAME`` proves the planted bug
    ``NAME`` of :mod:`specs.planted_bugs` instead of the production queue (and must fail).
    Where the proof fails without a counterexample (z3 ran out of time, or a planted method
    has a loop without an invariant), a bounded search for one follows.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in argv
    queue_class: type = FreeBlockQueue
    if "--bug" in argv:
        queue_class = PLANTED_BUGS[argv[argv.index("--bug") + 1]]
    print(f"proving {queue_class.__module__}.{queue_class.__qualname__} for queues of every size")
    status = 0
    total = 0.0
    for name in ("lemmas", *OPERATIONS):
        started = time.perf_counter()
        try:
            results = prove([name], queue_class)
        except Unsupported as error:
            print(f"{name}: not proved: {error}")
            results, failed = [], [Result(name, str(error), "", "unknown", 0.0)]
        else:
            failed = [r for r in results if r.verdict != "proved"]
        elapsed = time.perf_counter() - started
        total += elapsed
        if results:
            slowest = max(results, key=lambda r: r.seconds)
            print(
                f"{name}: {len(results) - len(failed)}/{len(results)} obligations proved in "
                f"{elapsed:.2f} s (slowest {slowest.seconds:.2f} s: {slowest.name})"
            )
            for result in results if verbose else failed:
                print(
                    f"  {result.verdict}: {result.name} [{result.where}] {result.seconds:.3f} s"
                    f"{' ' + result.counterexample if result.counterexample else ''}"
                )
        if name != "lemmas" and failed and all(r.verdict == "unknown" for r in failed):
            found = find_counterexample(name, queue_class)
            if found is not None:
                print(
                    f"  counterexample on a queue of at most 3 blocks: {found.name} "
                    f"[{found.where}] {found.counterexample}"
                )
        status |= bool(failed)
    print(f"total {total:.2f} s: {'every obligation proved' if not status else 'NOT PROVED'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
