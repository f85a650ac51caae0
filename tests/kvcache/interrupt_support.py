"""Exceptions injected where the interpreter may run a signal handler: the pool's interrupt tests.

:func:`at_checkpoints` counts every point of the chosen modules' frames where CPython may
run a signal handler, and raises :class:`Interrupted` at the event numbers a
:class:`Faults` names: a function's start, a call (before it, and after it returns, where
the eval breaker is checked: after a native method of the compiled queue, the only place an
interrupt can land), a loop's back edge, and on Python 3.10 an exception handler's start.
Python 3.10 and 3.11 are traced with ``sys.settrace`` (opcode events); 3.12 and later with
``sys.monitoring``, since there ``f_trace_opcodes`` set by a trace function yields no opcode
events (tests/queue/test_nested_interrupts.py still traces with ``sys.settrace``).
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

__all__ = ["Faults", "Interrupted", "at_checkpoints", "code_objects"]


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
#: Python 3.10 also runs pending handlers as an exception handler begins (see
#: tests/queue/test_nested_interrupts.py).
HANDLER_STARTS_ARE_CHECKPOINTS = sys.version_info < (3, 11)
MONITORING = sys.version_info >= (3, 12)


@dataclass(frozen=True)
class _Code:
    """Where the checkpoints of one code object are, by instruction offset."""

    before: frozenset[int]  # calls and back edges (and 3.10's handler starts)
    after_call: dict[int, int]  # a call's offset -> the offset of the instruction after it


@functools.cache
def _analysis(code: CodeType) -> _Code:
    instructions = list(dis.get_instructions(code))
    before = {
        instruction.offset
        for instruction in instructions
        if instruction.opname in CALLS or instruction.opname in BACK_EDGES
    }
    if HANDLER_STARTS_ARE_CHECKPOINTS:
        before |= {
            instruction.argval
            for instruction in instructions
            if instruction.opname in ("SETUP_FINALLY", "SETUP_WITH", "SETUP_ASYNC_WITH")
        }
    after_call = {
        instruction.offset: following.offset
        for instruction, following in itertools.pairwise(instructions)
        if instruction.opname in CALLS
    }
    return _Code(frozenset(before), after_call)


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
            checkpoint = offset in code.before or code.after_call.get(self.previous) == offset
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
            if isinstance(trace, LocalTrace):
                trace.previous = -1  # a generator resumed
            else:
                frame.f_trace = LocalTrace(frame)  # held by the frame (see above)
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
        faults.event()

    def instruction(code: CodeType, offset: int) -> None:
        frame = id(sys._getframe(1))
        analysis = _analysis(code)
        after = analysis.after_call.get(previous.get(frame, -1))
        checkpoint = offset in analysis.before or after == offset
        previous[frame] = offset
        if checkpoint:
            faults.event()

    monitoring.use_tool_id(tool, "pool interrupt tests")
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
