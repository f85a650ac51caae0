"""What the translator works on: a symbolic path, its outcomes, the obligations, loop views."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specs.proof.heap import (
    Ghost,
    Heap,
)

__all__ = [
    "SELF",
    "UNBOUND",
    "GeneratorRef",
    "ListRef",
    "LoopInvariant",
    "LoopSpec",
    "LoopView",
    "Obligation",
    "Outcome",
    "Raised",
    "State",
    "Unsupported",
]


class Unsupported(Exception):
    """The translator met code it cannot translate; the proof stops rather than skip it."""


@dataclass(frozen=True)
class ListRef:
    """A Python list, by identity; its contents live in :attr:`State.lists`."""

    ident: int


@dataclass(frozen=True)
class GeneratorRef:
    """A generator object: what calling a generator function returns, its body not yet run.

    ``function`` is the name of the generator function (``_walk``), ``args`` the values it was
    called with (``SELF`` first for a method). What the body does when the generator is
    resumed is proved apart, step by step (:mod:`specs.proof.walks`).
    """

    function: str
    args: tuple[Any, ...]


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
