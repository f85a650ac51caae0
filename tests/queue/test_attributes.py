"""Which attributes a queue takes: the same names in the pure and the compiled build.

The pure build's queues are slotted. The compiled queue is a native class that mypyc gives an
instance dict (it is generic), so the compiled build installs ``_slotted.set_declared_attribute``
to refuse the same names; these tests run on whichever build is imported, and the last ones
drive that function directly so that the pure build's run checks it too.
"""

from __future__ import annotations

from typing import Any

import pytest

import verified_queue
from verified_queue import _slotted
from verified_queue.block import Block
from verified_queue.checked import CheckedFreeBlockQueue
from verified_queue.queue import FreeBlockQueue


class SlottedSubclass(FreeBlockQueue[Block]):
    """A user's queue that declares its one field in ``__slots__``."""

    __slots__ = ("label",)

    label: str


class DictSubclass(FreeBlockQueue[Block]):
    """A user's queue without ``__slots__``, whose instances therefore have a dict."""


@pytest.mark.parametrize("queue_type", [FreeBlockQueue, CheckedFreeBlockQueue, SlottedSubclass])
def test_a_misspelt_attribute_is_refused_and_nothing_is_stored(queue_type: type[Any]) -> None:
    """Assigning a name no class of the queue declares raises AttributeError and stores nothing."""
    queue = queue_type([Block()])
    with pytest.raises(AttributeError, match="full_chek_every"):
        queue.full_chek_every = 5
    assert not hasattr(queue, "full_chek_every")
    assert len(queue) == 1


def test_declared_fields_and_properties_can_still_be_set() -> None:
    """The queue's own fields, check mode's property and a subclass's slot take assignment."""
    queue = CheckedFreeBlockQueue([Block()])
    queue.full_check_every = 7
    assert queue.full_check_every == 7
    queue.num_free_blocks = 1
    assert len(queue) == 1
    user = SlottedSubclass()
    user.label = "gpu0"
    assert user.label == "gpu0"


def test_a_method_name_is_read_only() -> None:
    """Assigning over a method raises AttributeError and the method is untouched."""
    queue: Any = FreeBlockQueue([Block()])
    with pytest.raises(AttributeError, match="popleft"):
        queue.popleft = None
    assert isinstance(queue.popleft(), Block)


def test_a_subclass_without_slots_takes_any_attribute() -> None:
    """A subclass without __slots__ has instances with a dict in both builds, as Python gives it."""
    queue: Any = DictSubclass()
    queue.anything = 1
    assert queue.anything == 1


def test_only_the_compiled_build_installs_the_guard() -> None:
    """The compiled queue refuses through set_declared_attribute; the pure one needs no guard."""
    installed = vars(FreeBlockQueue).get("__setattr__") is _slotted.set_declared_attribute
    assert installed == verified_queue.COMPILED


class NativeStandIn:
    """A class with an instance dict, standing in for the compiled queue in the pure build."""

    @property
    def field(self) -> int:
        """A property with a setter, like check mode's ``full_check_every``."""
        return 0

    @field.setter
    def field(self, value: int) -> None:
        """Take any value and keep none."""

    def method(self) -> None:
        """Do nothing: a name that is not a field."""


NativeStandIn.__setattr__ = _slotted.set_declared_attribute  # type: ignore[method-assign]


class SlottedStandIn(NativeStandIn):
    """A slotted subclass of the stand-in, like check mode's queue."""

    __slots__ = ("own",)


class DictStandIn(NativeStandIn):
    """A subclass of the stand-in without __slots__."""


def test_set_declared_attribute_refuses_what_slots_would() -> None:
    """Undeclared names, method names and __dict__ raise; slots and properties are set."""
    plain: Any = SlottedStandIn()
    plain.own = 1
    plain.field = 2
    assert plain.own == 1
    with pytest.raises(AttributeError, match="object has no attribute 'typo'"):
        plain.typo = 1
    with pytest.raises(AttributeError, match="attribute 'method' is read-only"):
        plain.method = 1
    with pytest.raises(AttributeError, match="no attribute '__dict__'"):
        plain.__dict__ = {}
    assert vars(plain) == {}


def test_set_declared_attribute_lets_a_dict_subclass_store_anything() -> None:
    """A subclass that would have a dict in the pure build keeps any name, methods' included."""
    value: Any = DictStandIn()
    value.typo = 1
    value.method = 2
    assert (value.typo, value.method) == (1, 2)


def test_set_declared_attribute_remembers_only_names_it_allowed() -> None:
    """A refused name is refused again; an allowed one is cached for its class only."""
    # From a cold cache, whatever ran before: this test is the one that fills it.
    _slotted._SETTABLE.discard((SlottedStandIn, "own"))
    value: Any = SlottedStandIn()
    for _ in range(2):
        with pytest.raises(AttributeError):
            value.typo = 1
    value.own = 3
    assert (SlottedStandIn, "own") in _slotted._SETTABLE
    assert (SlottedStandIn, "typo") not in _slotted._SETTABLE


def _twins(mixin: bool) -> tuple[type[Any], type[Any]]:
    """A guarded stand-in (a dict, ``set_declared_attribute``) and its truly slotted twin.

    With ``mixin``, both also derive from a class without ``__slots__`` listed after the
    stand-in, which gives the twin's instances a dict. Defined afresh at each call, so that
    the guard's per-class memory starts empty and every decision is worked out in the test.
    """

    class Mixin:
        pass

    mixins = (Mixin,) if mixin else ()

    class SetOnly:  # a data descriptor by its __set__ alone
        def __get__(self, instance: object, owner: type) -> int:
            return 0

        def __set__(self, instance: object, value: object) -> None:
            """Keep nothing."""

    class DeleteOnly:  # a data descriptor by its __delete__ alone: assignment is refused
        def __get__(self, instance: object, owner: type) -> int:
            return 0

        def __delete__(self, instance: object) -> None:
            """Keep nothing."""

    class Declarations:
        __slots__ = ()
        constant = 1
        set_only = SetOnly()
        delete_only = DeleteOnly()

        @property
        def field(self) -> int:
            return 0

        @field.setter
        def field(self, value: int) -> None:
            """Take any value and keep none."""

        @property
        def read_only(self) -> int:
            return 0

        def method(self) -> None:
            """A name that is not a field."""

    class Guarded(Declarations):  # has a dict, as the compiled queue does
        __setattr__ = _slotted.set_declared_attribute

    # Built by type(): a class statement's bases must be fixed for the type checker.
    # One name for both, so that an error Python words names the same class.
    guarded = type("Twin", (Guarded, *mixins), {"__slots__": ("own",)})
    slotted = type("Twin", (Declarations, *mixins), {"__slots__": ("own",)})
    return guarded, slotted


NAMES = ["own", "field", "read_only", "set_only", "delete_only", "method", "constant", "typo"]
NAMES += ["__dict__", "__class__"]


@pytest.mark.parametrize("mixin", [False, True], ids=["slotted", "dict from a mixin"])
@pytest.mark.parametrize("name", NAMES)
def test_the_guard_takes_and_refuses_each_name_as_a_slotted_class_does(
    name: str, mixin: bool
) -> None:
    """For a name of each kind, the guarded class and its slotted twin agree: set, or refused.

    A descriptor's refusal is Python's own in both, word for word: the guard must pass such a
    name to the descriptor, not refuse it in its own words.
    """

    def outcome(cls: type[Any]) -> str:
        instance = cls()
        try:
            setattr(instance, name, {} if name == "__dict__" else cls if name == "__class__" else 5)
        except (AttributeError, TypeError) as error:
            worded = name in {"read_only", "delete_only"}
            return f"{type(error).__name__}: {error}" if worded else type(error).__name__
        return "set"

    guarded, slotted = _twins(mixin)
    assert outcome(guarded) == outcome(slotted)
    # The second assignment of a name the guard allowed is served from its memory.
    assert outcome(guarded) == outcome(slotted)
