"""Attribute setting as a slotted class does it, for the compiled queue, which has an instance dict.

mypyc gives every native class with a ``typing.Generic`` base an instance ``__dict__``, so
the compiled :class:`~verified_queue.FreeBlockQueue` (generic, so that ``FreeBlockQueue[B]``
type-checks) would silently keep a misspelt attribute such as ``queue.full_chek_every = 5``
that the pure build, whose queue is slotted, refuses. The compiled build installs
:func:`set_declared_attribute` as the class's ``__setattr__`` to refuse the same names.

It costs nothing on the hot path: compiled methods write the queue's fields as C struct
members and never call ``__setattr__``; only assignments made from interpreted code (check
mode's own fields, a user's subclass, a typo) go through it. The pure build does not install
it: there every ``self.num_free_blocks = ...`` would pay for a Python call.
"""

from __future__ import annotations

__all__ = ["set_declared_attribute"]


def _instances_have_dict(cls: type, native: type) -> bool:
    """Whether instances of ``cls`` would have a ``__dict__`` if ``native`` were slotted.

    A class statement gives its instances a dict unless it declares ``__slots__``;
    ``native`` itself and the classes it sits on (``Generic``, ``object``) add none in the
    pure build, so they do not count. (A subclass listing ``"__dict__"`` in its slots cannot
    be created over the compiled queue, which already has a dict: Python refuses it.)
    """
    below = native.__mro__
    for klass in cls.__mro__:
        if klass in below:
            continue
        if "__slots__" not in vars(klass):
            return True
    return False


def _is_data_descriptor(value: object) -> bool:
    """Whether ``value`` takes assignment itself (a slot, a native field, a property)."""
    kind = type(value)
    return hasattr(kind, "__set__") or hasattr(kind, "__delete__")


#: ``(class, name)`` pairs already found settable: check mode sets its own fields on every
#: operation, and the walk over the MRO need not be repeated for each.
_SETTABLE: set[tuple[type, str]] = set()


def set_declared_attribute(self: object, name: str, value: object) -> None:
    """Set ``name`` on ``self`` only where a slotted class would let it be set.

    A name some class of ``self`` declares as a field (a slot, a native field, a property)
    is set through that declaration; any other name raises :class:`AttributeError`, as the
    pure build's slotted queue does, unless a subclass without ``__slots__`` gave instances
    a dict, as it would in the pure build.
    """
    cls = type(self)
    if (cls, name) not in _SETTABLE:
        _refuse_undeclared(cls, name)
        _SETTABLE.add((cls, name))
    object.__setattr__(self, name, value)


def _refuse_undeclared(cls: type, name: str) -> None:
    """Raise the :class:`AttributeError` a slotted ``cls`` raises for ``name``; else nothing."""
    has_dict = _instances_have_dict(cls, _native_base(cls))
    if name == "__dict__" and not has_dict:
        raise AttributeError(f"{cls.__name__!r} object has no attribute '__dict__'")
    for klass in cls.__mro__:
        if name in vars(klass):
            if _is_data_descriptor(vars(klass)[name]) or has_dict:
                return
            raise AttributeError(f"{cls.__name__!r} object attribute {name!r} is read-only")
    if not has_dict:
        raise AttributeError(f"{cls.__name__!r} object has no attribute {name!r}")


def _native_base(cls: type) -> type:
    """The class in ``cls``'s MRO that installed :func:`set_declared_attribute`."""
    for klass in cls.__mro__:
        if vars(klass).get("__setattr__") is set_declared_attribute:
            return klass
    return object
