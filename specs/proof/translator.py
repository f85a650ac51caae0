"""A symbolic executor for the subset of Python the queue's methods are written in."""

from __future__ import annotations

import ast
import builtins
import typing
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import z3  # type: ignore[import-untyped, import-not-found, unused-ignore]

from specs.proof.heap import (
    HEAD,
    NODE,
    NONE,
    TAIL,
    VALUE_EQUALS,
    Ghost,
    Heap,
)
from specs.proof.source import (
    _Function,
    _is_project_function,
    _load,
    _method,
    _raised_class,
)
from specs.proof.state import (
    SELF,
    UNBOUND,
    GeneratorRef,
    ListRef,
    LoopInvariant,
    LoopSpec,
    LoopView,
    Obligation,
    Outcome,
    Raised,
    State,
    Unsupported,
    _Path,
)
from verified_queue.block import Sentinel

__all__ = ["Translator"]


_LINKS = {"next_free_block": "nxt", "prev_free_block": "prv"}
_SENTINEL_FIELDS = {"fake_free_list_head": HEAD, "fake_free_list_tail": TAIL}
_EXCEPTION_HANDLERS_PROVED_UNREACHABLE = (AttributeError, TypeError)


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
        #: The nodes ``Sentinel(...)`` returns, in order: fresh objects the caller named (the
        #: constructor's proof names them HEAD and TAIL). A call past the list is Unsupported.
        self.allocations: list[Any] = []
        #: What a ``yield`` does: given the state at the yield, the yielded value and where, it
        #: states the obligations of the step that ends there and returns the state in which
        #: the generator resumes (:mod:`specs.proof.walks`). ``None``: a yield is Unsupported.
        self.on_yield: Callable[[State, Any, str], State] | None = None
        #: The locals a ``yield`` may change besides the heap (the walk's ghost state): a loop
        #: whose body yields gives them fresh values, as it does to the locals it assigns.
        self.yield_havocs: tuple[str, ...] = ()

    # -- entry ----------------------------------------------------------------------------------

    def run(self, name: str, args: Sequence[Any], state: State) -> list[Outcome]:
        """Run method ``name`` of the queue class on ``args``; one outcome per path."""
        function = _method(self.queue_class, name)
        if _is_generator(function):
            # A method written as a generator runs none of its body when called.
            where = f"{Path(function.filename).name}:{function.node.lineno}"
            return [
                Outcome("return", GeneratorRef(function.node.name, (SELF, *args)), state, where)
            ]
        results = self._call(function, [SELF, *args], state, f"{function.qualname}()")
        outcomes = []
        for result_state, value, raised in results:
            where = f"{Path(function.filename).name}:{function.node.lineno}"
            if raised is not None:
                outcomes.append(Outcome("raise", raised, result_state, where))
            else:
                outcomes.append(Outcome("return", value, result_state, where))
        return outcomes

    def run_body(
        self, name: str, args: Sequence[Any], state: State, extra: dict[str, Any]
    ) -> list[Outcome]:
        """Run the body of method ``name`` as a frame of its own; its outcomes keep its locals.

        ``extra`` adds locals that the code does not name (a walk's ghost state, ``$``-named),
        for the obligations a generator's steps and its loop invariant state over them.
        """
        function = _method(self.queue_class, name)
        spec = function.node.args
        if spec.vararg or spec.kwarg or spec.posonlyargs or spec.kwonlyargs:
            raise Unsupported(f"{function.qualname}: only plain parameters are translated")
        if len(spec.args) != len(args) + 1:
            raise Unsupported(f"the arguments do not match {function.qualname}'s")
        env = {p.arg: a for p, a in zip(spec.args, [SELF, *args], strict=True)} | extra
        inner = State(state.path, env, state.heap, dict(state.lists))
        return self._block(function.node.body, inner, function, None)

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
        # A default is never used: every parameter must be given (a default would be a value
        # the translator does not read).
        if spec.vararg or spec.kwarg or spec.posonlyargs or any(spec.kw_defaults):
            raise Unsupported(f"{where}: only plain parameters are translated")
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
            if isinstance(node.value, ast.Yield):
                # A suspension: the step that ends here is judged, and the generator resumes
                # in whatever state its caller leaves (the hook says which).
                if self.on_yield is None or node.value.value is None:
                    raise self._unsupported(function, node, "yield outside a walk's proof")
                hook = self.on_yield
                return self._then(
                    node.value.value, state, function, where, lambda s, v: [hook(s, v, where)]
                )
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
        yields = False
        for inner in ast.walk(node):
            # A return leaves the loop and the function, as a raise does: its path is an outcome
            # of the round, and the invariant is not asked of it.
            if isinstance(inner, (ast.Break, ast.Continue, ast.Try)):
                raise self._unsupported(function, inner, "break, continue or try in a loop")
            if isinstance(inner, ast.Raise) and isinstance(inner.exc, ast.Call):
                builders.add(id(inner.exc))
            if isinstance(inner, ast.Yield):
                yields = True
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
        assigned: set[str] = set(self.yield_havocs if yields else ())
        # A yield hands control to the caller, who may change any link and the count.
        writes_heap = writes_count = yields
        written_lists: set[int] = set()
        grown_lists: set[int] = set()  # lists the body appends to: their length changes too
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
            appended = _appended_list(inner, state)
            if appended is not None:
                grown_lists.add(appended.ident)
                continue
            # A call could change anything; only those that build an exception to raise are
            # allowed, and they are checked to build only (and ``list.append`` on a local list).
            if isinstance(inner, ast.Call) and not (
                id(inner) in builders
                and isinstance(inner.func, ast.Name)
                and _raised_class(self._global(inner.func.id, function, inner)) is not None
            ):
                raise self._unsupported(function, inner, "call inside a loop body")
        if iterable is not None and iterable.ident in written_lists | grown_lists:
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
        for ident in written_lists | grown_lists:
            array, length = state.lists[ident]
            grown = z3.FreshInt("length") if ident in grown_lists else length
            havoc.lists[ident] = (z3.FreshConst(array.sort(), "list"), grown)
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
                if outcome.kind in ("raise", "return"):
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
            # The round count and the extras stay known after the loop, for an undo that a
            # raise after it runs (a batch's undo walks back over all k rounds' blocks).
            done.env["$k"] = k
            done.env.update({f"${name}": value for name, value in extra.items()})
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
            if base is SELF and target.attr in _SENTINEL_FIELDS:
                # The constructor: the field must hold the node the proof reads it as (every
                # read of the field is that node), so the store is obliged to agree.
                self._oblige(
                    after,
                    f"{target.attr} names the queue's own {target.attr.rsplit('_', 1)[1]}",
                    self._where(function, target),
                    self._node(value, function, target) == _SENTINEL_FIELDS[target.attr],
                )
                return after
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
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            # An item read of a list, obliged in range as an item write is.
            read_from = state.env.get(node.value.id)
            if not isinstance(read_from, ListRef):
                raise self._unsupported(function, node, "item read of a non-list")
            ((after, index, raised),) = self._expression(node.slice, state, function)
            if raised is not None:
                raise self._unsupported(function, node, "raise inside a list index")
            array, length = after.lists[read_from.ident]
            self._oblige(
                after,
                f"list index in range ({ast.unparse(node)})",
                self._where(function, node),
                z3.And(index >= 0, index < length),
            )
            return [(after, array[index], None)]
        if isinstance(node, ast.List) and not node.elts:
            made = State(state.path, state.env, state.heap, dict(state.lists))
            return [(made, self.new_list(made, z3.K(z3.IntSort(), NONE), z3.IntVal(0)), None)]
        if isinstance(node, ast.Tuple) and all(isinstance(e, ast.Name) for e in node.elts):
            values = tuple(self._expression(e, state, function)[0][1] for e in node.elts)
            if all(isinstance(v, type) for v in values):
                return [(state, values, None)]
        raise self._unsupported(function, node, f"expression {type(node).__name__}")

    def _append(
        self, ref: ListRef, node: ast.Call, state: State, function: _Function
    ) -> list[_Path]:
        """``name.append(x)`` on a local list: ``x`` stored at its length, one longer."""
        results: list[_Path] = []
        for after, value, raised in self._expression(node.args[0], state, function):
            if raised is not None:
                raise self._unsupported(function, node, "raise inside an argument")
            array, length = after.lists[ref.ident]
            lists = dict(after.lists)
            lists[ref.ident] = (
                z3.Store(array, length, self._node(value, function, node)),
                length + 1,
            )
            results.append((State(after.path, after.env, after.heap, lists), NONE, None))
        return results

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
        if isinstance(op, (ast.Is, ast.IsNot)) and _is_node(left) and _is_node(right):
            return left == right if isinstance(op, ast.Is) else left != right
        if isinstance(op, (ast.Eq, ast.NotEq)) and _is_node(left) and _is_node(right):
            # By value: the block's own __eq__ answers, which the proof does not know.
            equal = VALUE_EQUALS(left, right)
            return equal if isinstance(op, ast.Eq) else z3.Not(equal)
        if isinstance(op, (ast.Is, ast.IsNot)):
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

    def _call_expression(  # noqa: PLR0911, PLR0915 -- one branch per kind of callee
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
            appended = _appended_list(node, state)
            if appended is not None:
                return self._append(appended, node, state, function)
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
            if (
                target is Sentinel
                and not node.keywords
                and all(isinstance(a, ast.Constant) for a in node.args)
            ):
                # A new sentinel: a fresh object, the next of the nodes the caller set aside.
                if not self.allocations:
                    raise self._unsupported(function, node, "a Sentinel allocation not named")
                return [(state, self.allocations.pop(0), None)]
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
            if _is_generator(callee):
                # Calling a generator function runs none of its body: it returns the generator.
                if names:
                    raise self._unsupported(function, node, "keyword argument to a generator")
                results.append((current, GeneratorRef(callee.node.name, tuple(positional)), None))
                continue
            results += self._call(
                callee, positional, current, self._where(function, node), keywords
            )
        return results


def _appended_list(node: ast.AST, state: State) -> ListRef | None:
    """The list ``node`` appends to, if it is ``name.append(x)`` on a local list."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "append"
        and isinstance(node.func.value, ast.Name)
        and len(node.args) == 1
        and not node.keywords
    ):
        ref = state.env.get(node.func.value.id)
        if isinstance(ref, ListRef):
            return ref
    return None


def _is_generator(function: _Function) -> bool:
    """Whether ``function`` is a generator function (a yield in its own body)."""
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    pending: list[ast.AST] = list(function.node.body)
    while pending:
        inner = pending.pop()
        if isinstance(inner, (ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(inner, nested):
            pending.extend(ast.iter_child_nodes(inner))
    return False


def _is_node(value: object) -> bool:
    return isinstance(value, z3.ExprRef) and value.sort() == NODE


def _as_load(target: ast.expr) -> ast.expr:
    """``target`` of an augmented assignment, as the expression that reads it."""
    copy = ast.parse(ast.unparse(target), mode="eval").body
    return ast.copy_location(copy, target)
