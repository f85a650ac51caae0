"""Exceptions injected where the interpreter may run a signal handler: the fault model's points.

:func:`at_checkpoints` counts every point of the chosen modules' frames where CPython may
run a signal handler, and raises :class:`Interrupted` at the event numbers a
:class:`Faults` names: a function's start, a call (before it, and after it returns, where
the eval breaker is checked: after a native method of the compiled queue, the only place an
interrupt can land), a loop's back edge, and on Python 3.10 a conditional jump taken and an
exception handler's start. The queue's tests (``tests/queue/test_nested_interrupts.py``) and
the pool's (``tests/kvcache/test_pool_nested_interrupts.py``) both use it. Python 3.10 and
3.11 are traced with ``sys.settrace`` (opcode events); 3.12 and later with
``sys.monitoring``: there ``sys.settrace`` runs on ``sys.monitoring`` itself, and a frame's
``f_trace_opcodes``, set by a trace function, can yield no opcode event in the first traced
run of a process (3.12.1: the first test of each pytest worker counted its function starts
only).

An exception is raised as the interpreter raises what a signal handler raises: in the frame, at
an instruction, where the exception table (3.11+) or the block stack (3.10) picks the handler.
Where the interpreter checks matters at a back edge: 3.13 checks before the jump, so the
handler is the one covering the jump itself; 3.10 to 3.12 check after it (3.11 and 3.12 then
look the handler up at the code unit just before the target). The two differ where the compiler
leaves a back edge outside the handler of the ``try`` its loop is in, as CPython 3.12 and 3.13
do with the inner loops of ``verified_queue._undo``'s retry loops: on 3.13 an interrupt there
escapes the ``try``, on 3.12 it does not (bytecode read by ``tests/queue/test_undo_nests.py``;
the undo now writes those loops so that they are covered). The injector raises where the
interpreter's handler is found: see :func:`_checked_at_target`.
"""

from __future__ import annotations

import dis
import functools
import itertools
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import CodeType, FrameType, FunctionType, ModuleType
from typing import Any

__all__ = [
    "Faults",
    "Interrupted",
    "at_checkpoints",
    "code_objects",
    "uncovered_back_edge",
]


class Interrupted(BaseException):
    """Stands for KeyboardInterrupt, raised by a signal handler at a checkpoint."""


@dataclass
class Faults:
    """Raise :class:`Interrupted` at the given event numbers; count the events and what fired."""

    at: frozenset[int] = frozenset()
    events: int = 0
    fired: list[Interrupted] = field(default_factory=list)

    def event(self) -> None:
        """Count one event; raise if it is one of those chosen."""
        self.events += 1
        if self.events in self.at:
            error = Interrupted(self.events)
            self.fired.append(error)
            raise error


#: The calls, after which (and, as the callee's frame would start, before which) a handler runs.
CALLS = frozenset(
    {"CALL", "CALL_KW", "CALL_FUNCTION_EX"}
    # Python 3.10's names.
    | {"CALL_FUNCTION", "CALL_FUNCTION_KW", "CALL_METHOD"}
)
#: The loops' back edges (3.11's conditional ones too; JUMP_BACKWARD_NO_INTERRUPT is not one).
BACK_EDGES = frozenset(
    {"JUMP_BACKWARD", "JUMP_ABSOLUTE"}
    | {f"POP_JUMP_BACKWARD_IF_{test}" for test in ("FALSE", "TRUE", "NONE", "NOT_NONE")}
)
#: Python 3.10 checks for pending handlers at the top of its interpreter loop, which it goes
#: back to after a call, a JUMP_ABSOLUTE and a conditional jump taken, forward or back, and
#: as an exception handler begins (the unwinding jumps to it through the top of the loop):
#: what a handler raises there skips the clause it was entering.
PYTHON_310 = sys.version_info < (3, 11)
HANDLER_STARTS_ARE_CHECKPOINTS = PYTHON_310
#: 3.10's conditional jumps, each a checkpoint when taken (checked at its target).
TAKEN_JUMPS = frozenset({"POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE"} if PYTHON_310 else ())
#: The instructions before which 3.10's loop does not check (entering a ``try``, a ``with``,
#: resuming a ``yield from``): no checkpoint is taken just before one of them.
UNCHECKED_BEFORE = frozenset(
    {"SETUP_FINALLY", "SETUP_WITH", "BEFORE_ASYNC_WITH", "YIELD_FROM"} if PYTHON_310 else ()
)
#: 3.13 checks at a back edge before jumping; 3.10 to 3.12 after, at the loop's target.
CHECKS_BEFORE_THE_JUMP = sys.version_info >= (3, 13)
MONITORING = sys.version_info >= (3, 12)


@dataclass(frozen=True)
class _Code:
    """Where the checkpoints of one code object are, by instruction offset."""

    start: bool  # whether the function's start is one (not on 3.10 if it starts a try)
    unchecked: frozenset[int]  # 3.10: where its loop does not check (UNCHECKED_BEFORE)
    before: frozenset[int]  # calls and back edges (and 3.10's handler starts)
    #: An instruction's offset -> the offset where its checkpoint is taken if execution goes
    #: there next: after a call, the instruction after it; after a jump checked at its target
    #: (3.10's taken conditional jumps, some back edges on 3.11 and 3.12), the target.
    after: dict[int, int]


def _exception_table(code: CodeType) -> list[Any]:
    """The exception table of ``code`` as ``dis`` parses it (3.11+; not in typeshed)."""
    entries: list[Any] = dis.Bytecode(code).exception_entries  # type: ignore[attr-defined]
    return entries


def _handler(entries: list[Any], offset: int) -> tuple[int, int, bool] | None:
    """The handler the exception table gives an exception raised at ``offset`` (3.11+)."""
    for entry in entries:  # the table's ranges do not overlap
        if entry.start <= offset < entry.end:
            return (entry.target, entry.depth, entry.lasti)
    return None


def _checked_at_target(code: CodeType, edge: int, target: int, conditional: bool) -> bool:
    """Whether a back edge's checkpoint is modelled at its target, not at the edge itself.

    3.11 and 3.12 run a handler after the jump, and look it up at the code unit just before
    the target (``next_instr - 1``), which no instruction event reports. Raising at the
    target gives that handler unless the target starts a ``try`` range; raising at the edge
    gives it unless no handler covers the edge (a back edge the compiler left out of its
    ``try``). So: at the target where that alone is the handler, at the edge otherwise. Where
    neither is, the edge's handler stands in, one further out or none (3.12: three back edges
    of the retry loops of ``verified_queue.kvcache._repair.finish``), an approximation.
    A conditional back edge (3.11's ``POP_JUMP_BACKWARD_IF_*``) checks only when it jumps:
    it is modelled at its target, taken only, wherever the target gives the real handler.
    """
    if PYTHON_310 or CHECKS_BEFORE_THE_JUMP:
        return False  # 3.10: the block stack is the same either side; 3.13: at the edge
    entries = _exception_table(code)
    real = _handler(entries, target - 2)  # a code unit is two bytes
    if conditional:
        return _handler(entries, target) == real
    return _handler(entries, target) == real != _handler(entries, edge)


@functools.cache
def _analysis(code: CodeType) -> _Code:
    instructions = list(dis.get_instructions(code))
    unchecked = frozenset(
        instruction.offset for instruction in instructions if instruction.opname in UNCHECKED_BEFORE
    )

    def checked(offset: int) -> bool:
        return offset not in unchecked

    before = {
        instruction.offset
        for instruction in instructions
        if instruction.opname in CALLS and checked(instruction.offset)
    }
    after = {
        instruction.offset: following.offset
        for instruction, following in itertools.pairwise(instructions)
        if instruction.opname in CALLS and checked(following.offset)
    }
    for instruction in instructions:
        target = instruction.argval
        if instruction.opname in TAKEN_JUMPS and checked(target):
            after[instruction.offset] = target
        elif instruction.opname in BACK_EDGES and checked(target):
            conditional = instruction.opname.startswith("POP_JUMP_BACKWARD_IF")
            if _checked_at_target(code, instruction.offset, target, conditional):
                after[instruction.offset] = target
            else:
                before.add(instruction.offset)
    if HANDLER_STARTS_ARE_CHECKPOINTS:
        before |= {
            instruction.argval
            for instruction in instructions
            if instruction.opname in ("SETUP_FINALLY", "SETUP_WITH", "SETUP_ASYNC_WITH")
            and checked(instruction.argval)
        }
    return _Code(checked(instructions[0].offset), unchecked, frozenset(before), after)


def uncovered_back_edge(error: BaseException, codes: set[CodeType]) -> str | None:
    """Where ``error`` was raised, if at a back edge of ``codes`` that no handler covers.

    Only 3.13 runs a handler there (before the jump), and what it raises leaves every
    ``try`` of the frame (``verified_queue._undo``, "Loops inside a try"). The last frame of
    ``codes`` that the traceback passes is where it was raised. Returns the function and
    line, or ``None``.
    """
    if not CHECKS_BEFORE_THE_JUMP:
        return None
    where: tuple[CodeType, int, int | None] | None = None
    trace = error.__traceback__
    while trace is not None:
        if trace.tb_frame.f_code in codes:
            where = (trace.tb_frame.f_code, trace.tb_lasti, trace.tb_lineno)
        trace = trace.tb_next
    if where is None:
        return None
    code, offset, line = where
    edges = {
        instruction.offset
        for instruction in dis.get_instructions(code)
        if instruction.opname in BACK_EDGES
    }
    if offset in edges and _handler(_exception_table(code), offset) is None:
        return f"{code.co_name}, line {line}"
    return None


def code_objects(modules: Iterable[ModuleType]) -> set[CodeType]:
    """Every code object defined in ``modules``: functions, methods, and the code nested in them."""
    found: set[CodeType] = set()

    def add(code: CodeType) -> None:
        if code.co_filename not in files or code in found:
            return
        found.add(code)
        for constant in code.co_consts:
            if isinstance(constant, CodeType):
                add(constant)

    def visit(value: object, depth: int) -> None:
        if isinstance(value, FunctionType):
            add(value.__code__)
        elif isinstance(value, (staticmethod, classmethod)):
            visit(value.__func__, depth)
        elif isinstance(value, property):
            for accessor in (value.fget, value.fset, value.fdel):
                visit(accessor, depth)
        elif isinstance(value, type) and depth < 3:
            for member in vars(value).values():
                visit(member, depth + 1)

    modules = list(modules)
    files = {module.__file__ for module in modules}
    for module in modules:
        for value in vars(module).values():
            visit(value, 0)
    return found


@contextmanager
def at_checkpoints(faults: Faults, codes: set[CodeType]) -> Iterator[None]:
    """Count the checkpoints that the frames of ``codes`` pass, raising where ``faults`` says."""
    if MONITORING:
        with _monitored(faults, codes):
            yield
    else:
        with _traced(faults, codes):
            yield


@contextmanager
def _traced(faults: Faults, codes: set[CodeType]) -> Iterator[None]:
    """Python 3.10 and 3.11: opcode events of ``sys.settrace``.

    A trace function that raises is uninstalled, and the frame's own trace function
    dropped: each frame's trace object, as it is dropped, installs the tracer again and
    gives the frame a new one, so that a second fault can land in the same frame (in the
    pool's handlers, say) and in frames that start later.
    """
    active = True

    class LocalTrace:
        """The trace function of one traced frame; ``previous``: its last instruction."""

        __slots__ = ("frame", "previous")

        def __init__(self, frame: FrameType) -> None:
            self.frame = frame
            self.previous = -1

        def __call__(self, frame: FrameType, event: str, _arg: object) -> Any:
            if event != "opcode":
                return self
            offset = frame.f_lasti
            code = _analysis(frame.f_code)
            checkpoint = offset in code.before or code.after.get(self.previous) == offset
            self.previous = offset
            del self  # the traceback of a fault must not keep this object alive
            if checkpoint:
                faults.event()
            return frame.f_trace

        def __del__(self) -> None:
            # Dropped by the interpreter (the frame has no trace function left), not replaced.
            if active and self.frame.f_trace is None:
                self.frame.f_trace = LocalTrace(self.frame)
                if sys.gettrace() is None:
                    sys.settrace(tracer)

    def tracer(frame: FrameType, event: str, _arg: object) -> Any:
        if event == "call" and frame.f_code in codes:
            frame.f_trace_opcodes = True
            trace = frame.f_trace
            code = _analysis(frame.f_code)
            if isinstance(trace, LocalTrace):
                trace.previous = -1  # a generator resumed, at the instruction after its last
                checkpoint = frame.f_lasti + 2 not in code.unchecked
            else:
                frame.f_trace = LocalTrace(frame)  # held by the frame (see above)
                checkpoint = code.start
            if checkpoint:
                faults.event()  # the function's start (or a generator's resumption)
            return frame.f_trace
        return None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield
    finally:
        active = False
        sys.settrace(previous)


@contextmanager
def _monitored(faults: Faults, codes: set[CodeType]) -> Iterator[None]:
    """Python 3.12+: ``sys.monitoring``'s starts, resumptions and instructions."""
    monitoring: Any = sys.monitoring  # type: ignore[attr-defined,unused-ignore]  # 3.12+
    events = monitoring.events
    tool = next(
        number for number in range(5, 0, -1) if monitoring.get_tool(number) is None
    )  # a free id (0 and 5 are taken by debuggers and profilers first)
    previous: dict[int, int] = {}  # id(frame) -> the frame's last instruction

    def started(_code: CodeType, _offset: int) -> None:
        previous[id(sys._getframe(1))] = -1
        faults.event()  # 3.12+ checks at every start and resumption (RESUME)

    def instruction(code: CodeType, offset: int) -> None:
        frame = id(sys._getframe(1))
        analysis = _analysis(code)
        after = analysis.after.get(previous.get(frame, -1))
        checkpoint = offset in analysis.before or after == offset
        previous[frame] = offset
        if checkpoint:
            faults.event()

    monitoring.use_tool_id(tool, "interrupt tests")
    try:
        monitoring.register_callback(tool, events.PY_START, started)
        monitoring.register_callback(tool, events.PY_RESUME, started)
        monitoring.register_callback(tool, events.INSTRUCTION, instruction)
        wanted = events.PY_START | events.PY_RESUME | events.INSTRUCTION
        for code in codes:
            monitoring.set_local_events(tool, code, wanted)
        try:
            yield
        finally:
            for code in codes:
                monitoring.set_local_events(tool, code, 0)
    finally:
        for event in (events.PY_START, events.PY_RESUME, events.INSTRUCTION):
            monitoring.register_callback(tool, event, None)
        monitoring.free_tool_id(tool)
