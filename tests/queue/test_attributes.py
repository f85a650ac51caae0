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
    value: Any = SlottedStandIn()
    for _ in range(2):
        with pytest.raises(AttributeError):
            value.typo = 1
    value.own = 3
    assert (SlottedStandIn, "own") in _slotted._SETTABLE
    assert (SlottedStandIn, "typo") not in _slotted._SETTABLE
